/*
 * sizewalk: the bytes several folders hold, counted as `du -sx` counts them, by a few threads.
 *
 * The compiled twin of the Python walk in janitor/host/sizewalk.py, whose docstring says what
 * is counted; both give the same numbers (tests/host/test_sizewalk.py runs both on the same trees).
 * In short, per folder: st_blocks * 512 of every entry below its top (the top's own blocks
 * told apart), a file with several links once over all the folders (the first folder listed
 * has it), never following a symlink, never entering another filesystem nor a mount point
 * below the top (the caller names them: a bind mount has the top's device), a pruned folder
 * counted by its own entry only, and what vanishes or cannot be read skipped.
 *
 * Portable POSIX.1-2008 (openat, fstatat, fdopendir, pthreads, C11 atomics): Linux and macOS.
 * No path below a top is ever handed to the kernel: every folder is opened relative to its
 * parent, and each walk keeps at most CHAIN_FDS of its folders open (the shallowest are closed
 * and opened again through ".." of the folder left, else by name from above, checked to be
 * the same inode), so any depth works, as with janitor.host.fdwalk.FolderChain.
 *
 * Work: a shared stack of items. First each top is opened and listed (an item per folder),
 * then its names are cut into runs (items); a run lstat's its names and walks each subfolder
 * depth first. While another thread waits for work, a walk hands it the shallowest subfolder
 * it has still to enter (opened: an item of its own), so one big folder is shared out too.
 * Files with several links are gathered as (folder, entry, inode, bytes) and settled at the
 * end, in folder order, whichever thread met them first.
 *
 * Input, on stdin, fields each ended by a NUL:
 *     "sizewalk1" THREADS FOLDERS
 *     per folder: DETAIL PATH PRUNES prune-path... MOUNTS mount...
 * DETAIL: 0 sizes only, 1 also each entry of the top, 2 also every file; a mount is a mount
 * point strictly below the top, relative to it ("a/b").
 *
 * Output, on stdout, in this machine's byte order, every number 8 bytes:
 *     "sizewalk1" and 7 NULs; FOLDERS
 *     per folder: PRESENT (0: no measure: missing, not a folder, unreadable), and when 1:
 *         DEVICE BYTES ENTRIES OWN NCHILDREN NFILES CHILDNAMES FILENAMES (the two lengths)
 *         the children's names (each ended by a NUL); their bytes[], newest[] (double),
 *         oldest[] (double), flags[] (1: a folder, 2: holds a file with several links)
 *         the files' paths relative to the top (each ended by a NUL); bytes[]; use[] (double)
 * Exit status: 0 when all of it was written; 2 bad input; 3 out of memory or no thread could
 * run; 4 the output could not be written. Nothing is ever printed on stderr: the caller falls
 * back to the Python walk on any failure.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* jlib, the library both our C programs share, compiled in with this file: one translation
 * unit, one compiler command (janitor/host/cbuild.py hashes every file included here). */
#include "jlib/buf.c"

#define MAGIC "sizewalk1"
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#define CHAIN_FDS 32    /* folders of one walk kept open below its top */
#define MAX_THREADS 64
#define MAX_RUN 1024    /* names of a top in one run, at most */
#define RUNS_PER_THREAD 16

#ifdef __APPLE__
#define MTIME(st) ((st)->st_mtimespec)
#define ATIME(st) ((st)->st_atimespec)
#else
#define MTIME(st) ((st)->st_mtim)
#define ATIME(st) ((st)->st_atim)
#endif

enum { E_INPUT = 2, E_MEMORY = 3, E_OUTPUT = 4 };

static _Noreturn void die(int code) { _exit(code); }

/* ---- growable byte buffers (jlib/buf.c): out of memory is the end ---------------------- */

typedef struct buf buf;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        die(E_MEMORY);
    return q;
}

static void *xcalloc(size_t n, size_t size) {
    void *q = calloc(n ? n : 1, size ? size : 1);
    if (q == NULL)
        die(E_MEMORY);
    return q;
}

static void grow(buf *b, size_t more) {
    if (buf_reserve(b, more) != 0)
        die(E_MEMORY);
}

static void put(buf *b, const void *src, size_t n) {
    buf_add(b, src, n);
    if (b->failed)
        die(E_MEMORY);
}

static void put_str(buf *b, const char *s) { put(b, s, strlen(s) + 1); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, sizeof v); }
static void put_i64(buf *b, int64_t v) { put(b, &v, sizeof v); }
static void put_f64(buf *b, double v) { put(b, &v, sizeof v); }

/* ---- what is measured ------------------------------------------------------------------- */

/* An entry right under a top, with what its subtree holds. */
typedef struct {
    int64_t bytes;   /* allocated bytes, files with several links left out */
    int64_t extra;   /* those files' bytes, each once (settled at the end) */
    int64_t entries; /* itself and everything counted below it */
    double newest;   /* the latest mtime in it, its own included */
    double oldest;   /* the earliest max(mtime, atime) of a file in it; inf: none */
    unsigned char present, is_dir, linked;
} kid;

typedef struct {
    dev_t dev;
    ino_t ino;
} fileid;

typedef struct {
    /* as asked */
    const char *path;
    int detail;
    const char **prunes;
    size_t nprune;
    const char **mounts; /* sorted (strcmp), relative to the top */
    size_t nmount;
    /* as found */
    int fd; /* -1: no measure */
    dev_t dev;
    int64_t own;
    fileid *pruned;
    size_t npruned;
    buf names; /* the top's names, each ended by a NUL */
    size_t *offs;
    size_t nnames;
    kid *kids; /* one per name */
    int64_t linked; /* bytes of the files with several links this folder has first */
} top;

/* A file with several links, met in folder `folder` under its entry `child`. */
typedef struct {
    uint64_t ino;
    int64_t bytes;
    uint32_t folder, child;
} link_rec;

/* A file of a folder told file by file (DETAIL 2). */
typedef struct {
    int64_t bytes;
    double use;
} file_rec;

/* One level of a walk's chain of folders: its descriptor (-1: closed to save descriptors),
 * the DIR it was listed with (owns the descriptor), its inode, the length of its path
 * relative to the top, and the subfolders still to enter (names in `names`, taken from the
 * end by the walk, from `head` by a thread that hands one on). */
typedef struct {
    size_t off;
    ino_t ino;
} sub;

typedef struct {
    int fd;
    DIR *dir;
    ino_t ino;
    size_t rellen;
    buf names;
    sub *subs;
    size_t head, count, cap;
} level;

/* What a walk adds up. */
typedef struct {
    int64_t blocks;
    int64_t n;
    double newest, oldest;
} acc;

/* A thread's own: what it gathered, and its walk's state. */
typedef struct {
    pthread_t thread;
    buf links;  /* link_rec */
    buf *fpath; /* per folder: file paths */
    buf *fnums; /* per folder: file_rec */
    level *lv;
    size_t nlv;
    buf rel;     /* the walk's folder, relative to the top, no NUL */
    buf scratch; /* a mount point candidate; a name being opened */
} worker;

/* Work. */
enum { TOP, RUN, SUB };

typedef struct item {
    struct item *next;
    int kind;
    uint32_t folder;
    uint32_t child;
    size_t a, b;    /* RUN: names [a, b) */
    int fd;         /* SUB: the subfolder, open */
    ino_t ino;      /* SUB: its inode */
    char *rel;      /* SUB: its path relative to the top */
    size_t rellen;
} item;

static top *tops;
static size_t ntops;
static int nthreads;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static item *queue;
static size_t queued;
static int busy, waiting, finished;
/* Threads waiting beyond the items queued for them: a walk hands on a subfolder while > 0. */
static atomic_int hungry;

static void lock(void) {
    if (pthread_mutex_lock(&mu) != 0)
        die(E_MEMORY);
}

static void unlock(void) {
    if (pthread_mutex_unlock(&mu) != 0)
        die(E_MEMORY);
}

static void update_hungry(void) {
    long h = (long)waiting - (long)queued;
    atomic_store_explicit(&hungry, h > 0 ? (int)h : 0, memory_order_relaxed);
}

/* Push items (a list linked by next, `n` of them) while holding the lock. */
static void push_locked(item *first, item *last, size_t n) {
    last->next = queue;
    queue = first;
    queued += n;
    update_hungry();
    if (n == 1) {
        if (pthread_cond_signal(&cv) != 0)
            die(E_MEMORY);
    } else if (pthread_cond_broadcast(&cv) != 0) {
        die(E_MEMORY);
    }
}

static item *new_item(int kind, uint32_t folder) {
    item *it = xcalloc(1, sizeof *it);
    it->kind = kind;
    it->folder = folder;
    it->fd = -1;
    return it;
}

/* ---- small helpers ---------------------------------------------------------------------- */

/* Seconds as Python's os.stat computes them (sec + nsec * 1e-9), so both walks agree. */
static double secs(struct timespec ts) {
    unsigned long nsec = (unsigned long)ts.tv_nsec;
    return ts.tv_sec + nsec * 1e-9;
}

static double use_of(const struct stat *st) {
    double m = secs(MTIME(st)), a = secs(ATIME(st));
    return a > m ? a : m;
}

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int is_pruned(const top *t, dev_t dev, ino_t ino) {
    for (size_t i = 0; i < t->npruned; i++)
        if (t->pruned[i].dev == dev && t->pruned[i].ino == ino)
            return 1;
    return 0;
}

/* Whether `rel`/`name` (relative to the top; rel may be empty) is a mount point. */
static int is_mount(worker *w, const top *t, const char *rel, size_t rellen, const char *name) {
    if (t->nmount == 0)
        return 0;
    buf *k = &w->scratch;
    k->len = 0;
    if (rellen) {
        put(k, rel, rellen);
        put(k, "/", 1);
    }
    put_str(k, name);
    const char *key = k->p;
    return bsearch(&key, t->mounts, t->nmount, sizeof *t->mounts, cmp_str) != NULL;
}

static void close_dir(int fd, DIR *dir) {
    if (dir != NULL)
        (void)closedir(dir);
    else if (fd >= 0)
        (void)close(fd);
}

/* Every name in folder `fd` (not "." nor ".."), each ended by a NUL, into `out`; with `keep`
 * the DIR stays open (it then owns fd: *dir), else a duplicate of fd is read and closed.
 * -1 and nothing when it cannot be read whole (as Python's os.listdir raises). */
static int list_names(int fd, buf *out, DIR **dir, int keep) {
    out->len = 0;
    int dfd = keep ? fd : dup(fd);
    if (dfd < 0)
        return -1;
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        if (!keep)
            (void)close(dfd);
        return -1;
    }
    int failed = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (e == NULL) {
            failed = errno != 0;
            break;
        }
        const char *n = e->d_name;
        if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
            continue;
        put_str(out, n);
    }
    if (failed)
        out->len = 0;
    if (keep)
        *dir = d;
    else
        (void)closedir(d);
    return failed ? -1 : 0;
}

static void add_link(worker *w, uint32_t folder, uint32_t child, ino_t ino, int64_t bytes) {
    link_rec r = {(uint64_t)ino, bytes, folder, child};
    put(&w->links, &r, sizeof r);
}

static void add_file(worker *w, uint32_t folder, const char *rel, size_t rellen,
                     const char *name, int64_t bytes, double use) {
    buf *p = &w->fpath[folder];
    if (rellen) {
        put(p, rel, rellen);
        put(p, "/", 1);
    }
    put_str(p, name);
    file_rec r = {bytes, use};
    put(&w->fnums[folder], &r, sizeof r);
}

/* Fold a walk's sums into entry `k` of a top (other threads may walk parts of it too). */
static void merge(kid *k, const acc *a) {
    lock();
    k->bytes += a->blocks * 512;
    k->entries += a->n;
    if (a->newest > k->newest)
        k->newest = a->newest;
    if (a->oldest < k->oldest)
        k->oldest = a->oldest;
    unlock();
}

/* ---- a walk: everything below one folder, depth first ---------------------------------- */

static level *level_at(worker *w, size_t k) {
    if (k >= w->nlv) {
        size_t n = w->nlv ? w->nlv * 2 : 16;
        while (n <= k)
            n *= 2;
        w->lv = xrealloc(w->lv, n * sizeof *w->lv);
        memset(w->lv + w->nlv, 0, (n - w->nlv) * sizeof *w->lv);
        w->nlv = n;
    }
    return &w->lv[k];
}

static void add_sub(level *L, size_t off, ino_t ino) {
    if (L->count == L->cap) {
        size_t n = L->cap ? L->cap * 2 : 16;
        L->subs = xrealloc(L->subs, n * sizeof *L->subs);
        L->cap = n;
    }
    L->subs[L->count].off = off;
    L->subs[L->count].ino = ino;
    L->count++;
}

/* List level `L` (the walk's current folder, w->rel its path) and count what is in it. */
static void scan(worker *w, const top *t, uint32_t folder, uint32_t child, level *L, acc *a) {
    L->head = L->count = 0;
    if (list_names(L->fd, &L->names, &L->dir, 1) != 0)
        return;
    const char *rel = w->rel.p;
    size_t rellen = w->rel.len;
    for (size_t off = 0; off < L->names.len;) {
        const char *name = L->names.p + off;
        size_t here = off;
        off += strlen(name) + 1;
        struct stat st;
        if (fstatat(L->fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (st.st_dev != t->dev)
            continue; /* another filesystem mounted there */
        double mtime = secs(MTIME(&st));
        if (S_ISDIR(st.st_mode)) {
            if (is_mount(w, t, rel, rellen, name))
                continue; /* a mount point (a bind mount has the top's device) */
            a->n++;
            a->blocks += st.st_blocks;
            if (mtime > a->newest)
                a->newest = mtime;
            if (!is_pruned(t, st.st_dev, st.st_ino))
                add_sub(L, here, st.st_ino);
            continue;
        }
        a->n++;
        if (st.st_nlink > 1)
            add_link(w, folder, child, st.st_ino, (int64_t)st.st_blocks * 512);
        else
            a->blocks += st.st_blocks;
        double use = use_of(&st);
        if (mtime > a->newest)
            a->newest = mtime;
        if (use < a->oldest)
            a->oldest = use;
        if (t->detail >= 2)
            add_file(w, folder, rel, rellen, name, (int64_t)st.st_blocks * 512, use);
    }
}

/* Open subfolder `name` of folder `dirfd` as the walk's device and inode `ino` want it;
 * -1 when it is gone, not a folder, a symlink, or not that one any more. */
static int open_sub(int dirfd, const char *name, dev_t dev, ino_t ino) {
    int fd = openat(dirfd, name, DIR_FLAGS);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != dev || st.st_ino != ino) {
        (void)close(fd);
        return -1;
    }
    return fd;
}

/* Hand subfolders on to the waiting threads: the shallowest the walk still has to enter, from
 * a level that is open (the top of the walk always is; closed ones are a prefix). */
static void share(worker *w, const top *t, const item *from, size_t depth, size_t first_open) {
    while (atomic_load_explicit(&hungry, memory_order_relaxed) > 0) {
        size_t k = 0;
        level *L = &w->lv[0];
        if (L->head >= L->count) {
            for (k = first_open; k <= depth; k++)
                if (w->lv[k].fd >= 0 && w->lv[k].head < w->lv[k].count)
                    break;
            if (k > depth)
                return;
            L = &w->lv[k];
        }
        sub s = L->subs[L->head++];
        const char *name = L->names.p + s.off;
        int fd = open_sub(L->fd, name, t->dev, s.ino);
        if (fd < 0)
            continue;
        item *it = new_item(SUB, from->folder);
        it->child = from->child;
        it->fd = fd;
        it->ino = s.ino;
        size_t nlen = strlen(name);
        it->rellen = L->rellen + 1 + nlen;
        it->rel = xrealloc(NULL, it->rellen + 1);
        memcpy(it->rel, w->rel.p, L->rellen);
        it->rel[L->rellen] = '/';
        memcpy(it->rel + L->rellen + 1, name, nlen + 1);
        lock();
        push_locked(it, it, 1);
        unlock();
    }
}

/* Level k again, opened down from the nearest open level above it by the names in w->rel,
 * each checked to be the inode the walk saw; -1 if one is not. */
static int reopen_down(worker *w, dev_t dev, size_t k) {
    size_t j = k - 1;
    while (j > 0 && w->lv[j].fd < 0)
        j--;
    int fd = w->lv[j].fd, mine = 0;
    for (size_t lvl = j + 1; lvl <= k; lvl++) {
        size_t a = w->lv[lvl - 1].rellen + 1, b = w->lv[lvl].rellen;
        w->scratch.len = 0;
        put(&w->scratch, w->rel.p + a, b - a);
        put(&w->scratch, "", 1);
        int nxt = open_sub(fd, w->scratch.p, dev, w->lv[lvl].ino);
        if (mine)
            (void)close(fd);
        if (nxt < 0)
            return -1;
        fd = nxt;
        mine = 1;
    }
    return fd;
}

/* Go up from level *depth; 0 when the folder there could not be opened again as the very one
 * left (the caller then skips what is left in it). */
static int leave(worker *w, const top *t, size_t *depth, size_t *first_open) {
    size_t k = *depth - 1;
    level *child = &w->lv[*depth], *L = &w->lv[k];
    int ok = 1;
    w->rel.len = L->rellen;
    if (L->fd < 0) {
        int fd = -1;
        if (child->fd >= 0) {
            fd = openat(child->fd, "..", DIR_FLAGS);
            struct stat st;
            if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_dev != t->dev || st.st_ino != L->ino)) {
                (void)close(fd);
                fd = -1;
            }
        }
        if (fd < 0)
            fd = reopen_down(w, t->dev, k);
        if (fd < 0) {
            *first_open = k + 1;
            ok = 0;
        } else {
            L->fd = fd;
            L->dir = NULL;
            *first_open = k;
        }
    }
    close_dir(child->fd, child->dir);
    child->fd = -1;
    child->dir = NULL;
    *depth = k;
    return ok;
}

/* Walk everything below folder `fd0` (inode ino0; its path relative to the top in w->rel),
 * adding to `a`; fd0 is closed at the end. */
static void walk(worker *w, const top *t, const item *from, int fd0, ino_t ino0, acc *a) {
    size_t depth = 0, first_open = 1;
    level *L = level_at(w, 0);
    L->fd = fd0;
    L->dir = NULL;
    L->ino = ino0;
    L->rellen = w->rel.len;
    int fresh = 1;
    for (;;) {
        L = &w->lv[depth];
        if (fresh) {
            fresh = 0;
            scan(w, t, from->folder, from->child, L, a);
            share(w, t, from, depth, first_open);
        }
        if (L->head < L->count) {
            sub s = L->subs[--L->count];
            const char *name = L->names.p + s.off;
            int fd = open_sub(L->fd, name, t->dev, s.ino);
            if (fd < 0)
                continue;
            size_t k = depth + 1;
            level *N = level_at(w, k);
            N->fd = fd;
            N->dir = NULL;
            N->ino = s.ino;
            N->head = N->count = 0;
            put(&w->rel, "/", 1);
            put(&w->rel, name, strlen(name));
            N->rellen = w->rel.len;
            depth = k;
            fresh = 1;
            if (k + 1 - first_open > CHAIN_FDS) {
                level *C = &w->lv[first_open];
                close_dir(C->fd, C->dir);
                C->fd = -1;
                C->dir = NULL;
                first_open++;
            }
            continue;
        }
        if (depth == 0)
            break;
        if (!leave(w, t, &depth, &first_open))
            w->lv[depth].count = w->lv[depth].head;
    }
    L = &w->lv[0];
    close_dir(L->fd, L->dir);
    L->fd = -1;
    L->dir = NULL;
}

/* ---- the items -------------------------------------------------------------------------- */

/* Open and list top `i`, then queue its names in runs. */
static void do_top(uint32_t i) {
    top *t = &tops[i];
    struct stat st, fst;
    if (lstat(t->path, &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    int fd = open(t->path, DIR_FLAGS);
    if (fd < 0)
        return;
    if (fstat(fd, &fst) != 0 || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino ||
        list_names(fd, &t->names, NULL, 0) != 0) {
        (void)close(fd);
        return;
    }
    t->pruned = xcalloc(t->nprune, sizeof *t->pruned);
    for (size_t p = 0; p < t->nprune; p++) {
        struct stat pst;
        if (lstat(t->prunes[p], &pst) == 0) {
            t->pruned[t->npruned].dev = pst.st_dev;
            t->pruned[t->npruned].ino = pst.st_ino;
            t->npruned++;
        }
    }
    size_t n = 0;
    for (size_t off = 0; off < t->names.len; off += strlen(t->names.p + off) + 1)
        n++;
    t->offs = xcalloc(n, sizeof *t->offs);
    t->kids = xcalloc(n, sizeof *t->kids);
    n = 0;
    for (size_t off = 0; off < t->names.len; off += strlen(t->names.p + off) + 1) {
        t->offs[n] = off;
        t->kids[n].newest = -INFINITY;
        t->kids[n].oldest = INFINITY;
        n++;
    }
    t->nnames = n;
    t->dev = st.st_dev;
    t->own = (int64_t)st.st_blocks * 512;
    t->fd = fd;
    if (n == 0)
        return;
    size_t runs = (size_t)nthreads * RUNS_PER_THREAD;
    size_t step = (n + runs - 1) / runs;
    if (step > MAX_RUN)
        step = MAX_RUN;
    if (step < 1)
        step = 1;
    item *first = NULL, *last = NULL;
    size_t count = 0;
    for (size_t a = 0; a < n; a += step) {
        item *it = new_item(RUN, i);
        it->a = a;
        it->b = a + step < n ? a + step : n;
        it->next = first;
        first = it;
        if (last == NULL)
            last = it;
        count++;
    }
    lock();
    push_locked(first, last, count);
    unlock();
}

/* A subfolder right under top `t` (entry `k`, st its lstat) and everything below it. */
static void do_subfolder(worker *w, top *t, item *it, uint32_t k, const char *name,
                         const struct stat *st) {
    if (is_mount(w, t, "", 0, name))
        return; /* a mount point (a bind mount has the top's device) */
    kid *c = &t->kids[k];
    double mtime = secs(MTIME(st));
    acc mine = {st->st_blocks, 1, mtime, INFINITY};
    lock();
    c->present = c->is_dir = 1;
    unlock();
    if (!is_pruned(t, st->st_dev, st->st_ino)) {
        int fd = open_sub(t->fd, name, t->dev, st->st_ino);
        if (fd >= 0) {
            acc below = {0, 0, 0.0, INFINITY};
            item from = *it;
            from.child = k;
            w->rel.len = 0;
            put(&w->rel, name, strlen(name));
            walk(w, t, &from, fd, st->st_ino, &below);
            mine.blocks += below.blocks;
            mine.n += below.n;
            if (below.newest > mine.newest)
                mine.newest = below.newest;
            mine.oldest = below.oldest;
        }
    }
    merge(c, &mine);
}

/* The names [a, b) of a top: each entry, and each subfolder walked. */
static void do_run(worker *w, item *it) {
    top *t = &tops[it->folder];
    for (size_t k = it->a; k < it->b; k++) {
        const char *name = t->names.p + t->offs[k];
        struct stat st;
        if (fstatat(t->fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (st.st_dev != t->dev)
            continue;
        if (S_ISDIR(st.st_mode)) {
            do_subfolder(w, t, it, (uint32_t)k, name, &st);
            continue;
        }
        kid *c = &t->kids[k]; /* only this run writes a file's entry */
        int64_t size = (int64_t)st.st_blocks * 512;
        double use = use_of(&st);
        c->present = 1;
        c->entries = 1;
        c->newest = secs(MTIME(&st));
        c->oldest = use;
        if (st.st_nlink > 1)
            add_link(w, it->folder, (uint32_t)k, st.st_ino, size);
        else
            c->bytes = size;
        if (t->detail >= 2)
            add_file(w, it->folder, "", 0, name, size, use);
    }
}

/* A subfolder handed on by another walk. */
static void do_sub(worker *w, item *it) {
    top *t = &tops[it->folder];
    acc a = {0, 0, 0.0, INFINITY};
    w->rel.len = 0;
    put(&w->rel, it->rel, it->rellen);
    walk(w, t, it, it->fd, it->ino, &a);
    merge(&t->kids[it->child], &a);
}

static void *work(void *arg) {
    worker *w = arg;
    lock();
    for (;;) {
        if (queue != NULL) {
            item *it = queue;
            queue = it->next;
            queued--;
            busy++;
            update_hungry();
            unlock();
            if (it->kind == TOP)
                do_top(it->folder);
            else if (it->kind == RUN)
                do_run(w, it);
            else
                do_sub(w, it);
            free(it->rel);
            free(it);
            lock();
            busy--;
            continue;
        }
        if (busy == 0) {
            finished = 1;
            if (pthread_cond_broadcast(&cv) != 0)
                die(E_MEMORY);
            break;
        }
        waiting++;
        update_hungry();
        while (queue == NULL && !finished)
            if (pthread_cond_wait(&cv, &mu) != 0)
                die(E_MEMORY);
        waiting--;
        update_hungry();
        if (finished)
            break;
    }
    unlock();
    return NULL;
}

/* ---- settling the links, and the output ------------------------------------------------- */

static int cmp_link(const void *x, const void *y) {
    const link_rec *a = x, *b = y;
    dev_t da = tops[a->folder].dev, db = tops[b->folder].dev;
    if (da != db)
        return da < db ? -1 : 1;
    if (a->ino != b->ino)
        return a->ino < b->ino ? -1 : 1;
    if (a->folder != b->folder)
        return a->folder < b->folder ? -1 : 1;
    if (a->child != b->child)
        return a->child < b->child ? -1 : 1;
    return 0;
}

/* A file with several links counts once in all: in the first folder listed that holds it;
 * in each entry of a top that holds it, once. */
static void settle_links(worker *ws) {
    size_t n = 0;
    for (int i = 0; i < nthreads; i++)
        n += ws[i].links.len / sizeof(link_rec);
    if (n == 0)
        return;
    link_rec *all = xcalloc(n, sizeof *all);
    size_t at = 0;
    for (int i = 0; i < nthreads; i++) {
        if (ws[i].links.len == 0)
            continue;
        memcpy(all + at, ws[i].links.p, ws[i].links.len);
        at += ws[i].links.len / sizeof(link_rec);
    }
    qsort(all, n, sizeof *all, cmp_link);
    for (size_t g = 0; g < n;) {
        size_t e = g + 1;
        while (e < n && tops[all[e].folder].dev == tops[all[g].folder].dev &&
               all[e].ino == all[g].ino)
            e++;
        tops[all[g].folder].linked += all[g].bytes;
        for (size_t r = g; r < e; r++) {
            if (r > g && all[r].folder == all[r - 1].folder && all[r].child == all[r - 1].child)
                continue;
            kid *c = &tops[all[r].folder].kids[all[r].child];
            c->extra += all[r].bytes;
            c->linked = 1;
        }
        g = e;
    }
    free(all);
}

static void emit_folder(buf *out, const top *t, uint32_t fi, worker *ws) {
    if (t->fd < 0) {
        put_u64(out, 0);
        return;
    }
    int64_t bytes = t->linked, entries = 0;
    uint64_t nkids = 0, kidnames = 0;
    for (size_t k = 0; k < t->nnames; k++) {
        const kid *c = &t->kids[k];
        if (!c->present)
            continue;
        bytes += c->bytes;
        entries += c->entries;
        nkids++;
        kidnames += strlen(t->names.p + t->offs[k]) + 1;
    }
    if (t->detail == 0)
        nkids = kidnames = 0;
    uint64_t nfiles = 0, filenames = 0;
    for (int i = 0; i < nthreads; i++) {
        nfiles += ws[i].fnums[fi].len / sizeof(file_rec);
        filenames += ws[i].fpath[fi].len;
    }
    put_u64(out, 1);
    put_u64(out, (uint64_t)t->dev);
    put_i64(out, bytes);
    put_i64(out, entries);
    put_i64(out, t->own);
    put_u64(out, nkids);
    put_u64(out, nfiles);
    put_u64(out, kidnames);
    put_u64(out, filenames);
    if (nkids) {
        for (size_t k = 0; k < t->nnames; k++)
            if (t->kids[k].present)
                put_str(out, t->names.p + t->offs[k]);
        for (size_t k = 0; k < t->nnames; k++)
            if (t->kids[k].present)
                put_i64(out, t->kids[k].bytes + t->kids[k].extra);
        for (size_t k = 0; k < t->nnames; k++)
            if (t->kids[k].present)
                put_f64(out, t->kids[k].newest);
        for (size_t k = 0; k < t->nnames; k++)
            if (t->kids[k].present)
                put_f64(out, t->kids[k].oldest);
        for (size_t k = 0; k < t->nnames; k++)
            if (t->kids[k].present)
                put_u64(out, (uint64_t)(t->kids[k].is_dir ? 1 : 0) |
                                 (uint64_t)(t->kids[k].linked ? 2 : 0));
    }
    for (int i = 0; i < nthreads; i++)
        put(out, ws[i].fpath[fi].p, ws[i].fpath[fi].len);
    for (int i = 0; i < nthreads; i++) {
        const file_rec *r = (const file_rec *)ws[i].fnums[fi].p;
        for (size_t j = 0; j < ws[i].fnums[fi].len / sizeof *r; j++)
            put_i64(out, r[j].bytes);
    }
    for (int i = 0; i < nthreads; i++) {
        const file_rec *r = (const file_rec *)ws[i].fnums[fi].p;
        for (size_t j = 0; j < ws[i].fnums[fi].len / sizeof *r; j++)
            put_f64(out, r[j].use);
    }
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            die(E_OUTPUT);
        }
        p += k;
        n -= (size_t)k;
    }
}

/* ---- input ------------------------------------------------------------------------------ */

static void read_all(int fd, buf *in) {
    for (;;) {
        grow(in, 65536);
        ssize_t k = read(fd, in->p + in->len, in->cap - in->len - 1); /* the last for a NUL */
        if (k < 0) {
            if (errno == EINTR)
                continue;
            die(E_INPUT);
        }
        if (k == 0)
            return;
        in->len += (size_t)k;
        in->p[in->len] = '\0';
    }
}

typedef struct {
    const char *p, *end;
} reader;

static const char *field(reader *r) {
    if (r->p >= r->end)
        die(E_INPUT);
    const char *f = r->p;
    const char *nul = memchr(f, '\0', (size_t)(r->end - f));
    if (nul == NULL)
        die(E_INPUT);
    r->p = nul + 1;
    return f;
}

static size_t number(reader *r, size_t max) {
    const char *f = field(r);
    if (*f < '0' || *f > '9')
        die(E_INPUT);
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(f, &end, 10);
    if (errno != 0 || end == NULL || *end != '\0' || v > max)
        die(E_INPUT);
    return (size_t)v;
}

static void parse(const buf *in) {
    reader r = {in->p, in->p + in->len};
    if (strcmp(field(&r), MAGIC) != 0)
        die(E_INPUT);
    nthreads = (int)number(&r, MAX_THREADS);
    if (nthreads < 1)
        nthreads = 1;
    ntops = number(&r, UINT32_MAX - 1);
    tops = xcalloc(ntops, sizeof *tops);
    for (size_t i = 0; i < ntops; i++) {
        top *t = &tops[i];
        t->fd = -1;
        t->detail = (int)number(&r, 2);
        t->path = field(&r);
        t->nprune = number(&r, in->len);
        t->prunes = xcalloc(t->nprune, sizeof *t->prunes);
        for (size_t p = 0; p < t->nprune; p++)
            t->prunes[p] = field(&r);
        t->nmount = number(&r, in->len);
        t->mounts = xcalloc(t->nmount, sizeof *t->mounts);
        for (size_t m = 0; m < t->nmount; m++)
            t->mounts[m] = field(&r);
        qsort(t->mounts, t->nmount, sizeof *t->mounts, cmp_str);
    }
    if (r.p != r.end)
        die(E_INPUT);
}

/* Enough descriptors for every walk's chain, the tops and the folders handed on: a folder
 * that cannot be opened is skipped, so running out would leave bytes uncounted. */
static void enough_fds(void) {
    struct rlimit rl;
    rlim_t need = (rlim_t)nthreads * (CHAIN_FDS + 8) + (rlim_t)ntops + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        need = rl.rlim_max;
    rl.rlim_cur = need;
    (void)setrlimit(RLIMIT_NOFILE, &rl); /* as many as before if refused */
}

int main(void) {
    buf in = {0};
    read_all(0, &in);
    parse(&in);
    enough_fds();
    worker *ws = xcalloc((size_t)nthreads, sizeof *ws);
    for (int i = 0; i < nthreads; i++) {
        ws[i].fpath = xcalloc(ntops, sizeof(buf));
        ws[i].fnums = xcalloc(ntops, sizeof(buf));
    }
    for (size_t i = ntops; i-- > 0;) {
        item *it = new_item(TOP, (uint32_t)i);
        it->next = queue;
        queue = it;
        queued++;
    }
    int started = 1;
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&ws[i].thread, NULL, work, &ws[i]) != 0)
            break; /* fewer threads: the work still gets done */
        started++;
    }
    work(&ws[0]);
    for (int i = 1; i < started; i++)
        if (pthread_join(ws[i].thread, NULL) != 0)
            die(E_MEMORY);
    settle_links(ws);
    buf out = {0};
    put(&out, MAGIC "\0\0\0\0\0\0", 16);
    put_u64(&out, (uint64_t)ntops);
    for (size_t i = 0; i < ntops; i++)
        emit_folder(&out, &tops[i], (uint32_t)i, ws);
    write_all(1, out.p, out.len);
    return 0;
}
