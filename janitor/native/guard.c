/*
 * guard.c: the compiled front end of space-janitor's guarded ffmpeg.
 *
 * `janitor shim install` (and `janitor run`) build this file with the machine's C compiler
 * and put the program first on PATH as `ffmpeg`, beside `ffmpeg.guard`: the Python guard,
 * whose lines starting with "#%" are this program's settings. For each call it
 *
 *   1. finds the real ffmpeg (JANITOR_FFMPEG, else the first `ffmpeg` on PATH that is not a
 *      guard) and execs it at once for a request for information (-version, -h ...);
 *   2. sends the call as it got it (arguments, folder, parent, the JANITOR_* variables that
 *      shape it) to the daemon's POST /v1/guard/call, in one request on its Unix socket, as
 *      the Python guard does (janitor.guarding.protocol): the daemon estimates, admits, pins
 *      and records the job, and answers what to do and the lines to print and log;
 *   3. runs the real ffmpeg and supervises it as the Python guard does: its output against
 *      the reservation, the reservation put at risk, signals passed on, ffmpeg never
 *      outliving us (PR_SET_PDEATHSIG on Linux; everywhere a sentinel process), the same
 *      exit codes and stderr lines.
 *
 * It holds no logic the daemon has. With no daemon answering, or an answer it does not
 * understand, it execs the Python guard (every wait bounded); without its settings it execs
 * the real ffmpeg. It never breaks an ffmpeg call.
 *
 * Installed as `ffprobe` too (beside `ffprobe.guard`), it is the guarded ffprobe: it finds the
 * real ffprobe the same way (JANITOR_FFPROBE), sends each call that is not a request for
 * information to POST /v1/guard/probe (the daemon marks the cache entries it probes awaiting
 * use for its caller, and refuses a probe of a cached WAV whose alignment could never fit).
 * The real ffprobe runs meanwhile, its stdout (and its stderr, when the two are one file)
 * held in a pipe until the answer lets it out (a refused probe shows none of it), so the
 * answer costs next to nothing: the same arguments, stdin, output and exit code. On a
 * terminal, or when ffprobe would read our stdin or write a file of its own, it is exec'd
 * once the answer came.
 *
 * Written in the manner of small system tools: no allocation it does not check, no call
 * whose error it ignores without saying why, no unbounded wait, no global state but what the
 * signal handlers share.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#ifdef __APPLE__
#include <mach-o/dyld.h>
#endif

/* jlib, the library both our C programs share, compiled in with this file: one translation
 * unit, one compiler command (janitor/host/cbuild.py hashes every file included here). */
#include "jlib/buf.c"
#include "jlib/clock.c"
#include "jlib/http.c"
#include "jlib/json.c"

extern char **environ;

#define GUARD_MARK "# space-janitor guard"
#define EXIT_REFUSED 75
#define EXIT_NO_FFMPEG 127
/* What every #define below says, Python says too, or it is this program's own: the watch's
 * (janitor.commands.watch), the guard's (janitor.commands.guard); tests/native/test_guard_native.py reads them. */
#define POLL_MS 200
#define MARGIN 0.05
#define SLACK (256.0 * 1024.0)
#define STOP_GRACE_MS 5000
#define CALL_MS_DEFAULT 60000
#define PROBE_MS 10000
#define RISK_MS 5000
#define RELEASE_MS 10000
#define MAX_REQUEST (8 << 20)
#define MAX_SIDECAR (256 << 10)
#define LOG_ROTATE (1 << 20)
#define FALLBACK_ENV "JANITOR_GUARD_FALLBACK"
/* Set with it: the seconds the call had taken (janitor.commands.guard.ELAPSED_ENV). A call's wait
 * for room has one deadline, from our start, however it is handed on. */
#define ELAPSED_ENV "JANITOR_GUARD_ELAPSED_S"
/* How long past the call's deadline we still wait for the daemon's verdict on a queued call
 * (its last try at admission) before the Python guard decides (janitor.commands.guard.WAIT_GRACE_S). */
#define WAIT_GRACE_MS 2000

/* ffmpeg's options that print something and exit (janitor.commands.guard.INFO_OPTIONS). */
static const char *const INFO_OPTIONS[] = {
    "-L", "-h", "-?", "-help", "--help", "-version", "-buildconf", "-formats", "-muxers",
    "-demuxers", "-devices", "-codecs", "-decoders", "-encoders", "-bsfs", "-protocols",
    "-filters", "-pix_fmts", "-layouts", "-sample_fmts", "-dispositions", "-colors",
    "-hwaccels", "-sources", "-sinks", NULL,
};

/* The variables a probe call sends (janitor.guarding.protocol.PROBE_ENV). */
static const char *const PROBE_ENV[] = {"TMPDIR", "JANITOR_POLICY", "JANITOR_CACHE_DIR", NULL};

/* The variables that shape a call (janitor.guarding.protocol.CALL_ENV). */
static const char *const CALL_ENV[] = {
    "JANITOR_JOB", "JANITOR_RUN", "JANITOR_POLICY", "JANITOR_CACHE_DIR", "JANITOR_GUARD_WAIT_S",
    NULL,
};

/* ---- what we say: stderr and guard.log ------------------------------------------------- */

static const char *g_log_dir; /* JANITOR_LOG_DIR, else the settings' log_dir; may be NULL */

static void say(const char *line) {
    struct buf b = {0};
    buf_str(&b, "space-janitor: ");
    buf_str(&b, line);
    buf_str(&b, "\n");
    if (b.failed) { buf_free(&b); return; }
    /* A stderr nobody reads must not kill us (the Python guard ignores SIGPIPE): SIGPIPE is
     * held back around the write and a pipe error taken from the pending set, not by setting
     * it ignored, which ffmpeg would inherit through exec. */
    sigset_t pipe_only, was, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    int held = sigprocmask(SIG_BLOCK, &pipe_only, &was) == 0 && !sigismember(&was, SIGPIPE);
    int broke = 0;
    size_t off = 0;
    while (off < b.len) {
        ssize_t n = write(2, b.p + off, b.len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EPIPE) broke = 1;
        if (n <= 0) break; /* nobody reads our stderr: nothing more to do */
        off += (size_t)n;
    }
    if (held) {
        int sig;
        if (broke && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE))
            (void)sigwait(&pipe_only, &sig);
        (void)sigprocmask(SIG_SETMASK, &was, NULL);
    }
    buf_free(&b);
}

/* mkdir -p, mode 0700 for what it creates */
static int make_dirs(const char *path) {
    char tmp[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* One line in guard.log (rotated past 1 MiB, one old copy), as the Python guard writes it. */
static void log_line(const char *message, int debug) {
    if (g_log_dir == NULL || *g_log_dir == '\0' || message == NULL) return;
    if (make_dirs(g_log_dir) != 0) return;
    struct buf path = {0}, old = {0}, line = {0};
    buf_fmt(&path, "%s/guard.log", g_log_dir);
    buf_fmt(&old, "%s/guard.log.1", g_log_dir);
    struct stat st;
    if (!path.failed && !old.failed && stat(path.p, &st) == 0 && st.st_size > LOG_ROTATE)
        (void)rename(path.p, old.p); /* as os.replace; a failure only delays the rotation */
    time_t t = time(NULL);
    struct tm tm;
    char stamp[32] = "";
    if (localtime_r(&t, &tm) != NULL) strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    buf_fmt(&line, "%s %s pid %ld: %s\n", stamp, debug ? "DEBUG" : "INFO", (long)getpid(),
            message);
    if (!path.failed && !line.failed) {
        int fd = open(path.p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) {
            size_t off = 0;
            while (off < line.len) {
                ssize_t n = write(fd, line.p + off, line.len - off);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                off += (size_t)n;
            }
            (void)close(fd);
        }
    }
    buf_free(&path);
    buf_free(&old);
    buf_free(&line);
}

/* janitor.humanize.format_size: "1.5 GiB"; exact bytes below 1 KiB. */
static void format_size(char *out, size_t size, double n) {
    const char *sign = n < 0 ? "-" : "";
    if (n < 0) n = -n;
    if (n < 1024) {
        snprintf(out, size, "%s%lld B", sign, (long long)n);
        return;
    }
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    for (int i = 0; i < 4; i++) {
        n /= 1024;
        if (n < 1024 || i == 3) {
            char text[64];
            snprintf(text, sizeof text, "%.1f", n);
            size_t len = strlen(text);
            while (len > 0 && text[len - 1] == '0') text[--len] = '\0';
            if (len > 0 && text[len - 1] == '.') text[--len] = '\0';
            snprintf(out, size, "%s%s %s", sign, text, units[i]);
            return;
        }
    }
}

/* ---- files ----------------------------------------------------------------------------- */

/* Up to `max` bytes of a file; NULL when it cannot be read. */
static char *read_file(const char *path, size_t max, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    char *data = malloc(max + 1);
    if (data == NULL) { (void)close(fd); return NULL; }
    size_t got = 0;
    while (got < max) {
        ssize_t n = read(fd, data + got, max - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { free(data); (void)close(fd); return NULL; }
        if (n == 0) break;
        got += (size_t)n;
    }
    (void)close(fd);
    data[got] = '\0';
    if (len) *len = got;
    return data;
}

static int contains(const char *hay, size_t n, const char *needle) {
    return mem_find(hay, n, needle) != NULL;
}

static int has_mark(const char *path) {
    size_t n = 0;
    char *head = read_file(path, 512, &n);
    if (head == NULL) return 0;
    int yes = contains(head, n, GUARD_MARK);
    free(head);
    return yes;
}

/* A guard of ours: its mark in its first 512 bytes (a script), or beside its real path an
 * `ffmpeg.guard` with the mark (this program). janitor.guarding.mark.is_guard says the same. */
static int is_guard(const char *path) {
    if (has_mark(path)) return 1;
    char real[PATH_MAX];
    if (realpath(path, real) == NULL) return 0;
    struct buf side = {0};
    buf_fmt(&side, "%s.guard", real);
    int yes = !side.failed && has_mark(side.p);
    buf_free(&side);
    return yes;
}

static int executable_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* This program's own path, resolved; NULL when the system will not say. The kernel's word
 * where it gives one (a link or a copy of us is named as it was run), else argv[0] with a /. */
static char *self_path(const char *argv0) {
    char raw[PATH_MAX], real[PATH_MAX];
    int got = 0;
#if defined(__linux__)
    ssize_t n = readlink("/proc/self/exe", raw, sizeof raw - 1);
    if (n > 0) {
        raw[n] = '\0';
        got = 1;
    }
#elif defined(__APPLE__)
    uint32_t size = sizeof raw;
    got = _NSGetExecutablePath(raw, &size) == 0;
#endif
    if (!got && argv0 != NULL && strchr(argv0, '/') != NULL && strlen(argv0) < sizeof raw) {
        strcpy(raw, argv0);
        got = 1;
    }
    if (!got || realpath(raw, real) == NULL) return NULL; /* replaced since it started */
    return strdup(real);
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (a == NULL || b == NULL) return 0;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* What this program stands for, by the name it was installed under: "ffmpeg" or "ffprobe". */
static const char *g_name = "ffmpeg";

/* janitor.commands.guard.find_real, with the same one-line errors. */
static char *find_real(const char *self, const char **error, struct buf *why) {
    const char *variable = strcmp(g_name, "ffprobe") == 0 ? "JANITOR_FFPROBE" : "JANITOR_FFMPEG";
    const char *chosen = getenv(variable);
    if (chosen != NULL && *chosen != '\0') {
        if (!executable_file(chosen)) {
            buf_fmt(why, "%s=%s is not an executable file", variable, chosen);
            *error = why->p;
            return NULL;
        }
        if (same_file(chosen, self) || is_guard(chosen)) {
            buf_fmt(why, "%s=%s is the guard itself; point it at %s", variable, chosen, g_name);
            *error = why->p;
            return NULL;
        }
        return strdup(chosen);
    }
    const char *path = getenv("PATH");
    if (path == NULL) path = "/bin:/usr/bin";
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        struct buf cand = {0};
        if (n == 0) buf_fmt(&cand, "./%s", g_name);
        else { buf_add(&cand, p, n); buf_fmt(&cand, "/%s", g_name); }
        if (!cand.failed && executable_file(cand.p) && !same_file(cand.p, self) &&
            !is_guard(cand.p))
            return cand.p; /* handed to the caller */
        buf_free(&cand);
        if (colon == NULL) break;
        p = colon + 1;
    }
    buf_fmt(why, "no %s found on PATH after the guard; install ffmpeg or set %s", g_name,
            variable);
    *error = why->failed ? "no real program found on PATH after the guard" : why->p;
    return NULL;
}

/* ---- settings: the "#% key value" lines of ffmpeg.guard -------------------------------- */

struct settings {
    char *python, *socket, *log_dir, *policy, *cache_dir, *wait_s;
    char *sidecar;
};

static void read_settings(const char *self, struct settings *s) {
    memset(s, 0, sizeof *s);
    if (self == NULL) return;
    struct buf side = {0};
    buf_fmt(&side, "%s.guard", self);
    if (side.failed) return;
    size_t len = 0;
    char *text = read_file(side.p, MAX_SIDECAR, &len);
    if (text == NULL) { buf_free(&side); return; }
    s->sidecar = side.p; /* kept */
    for (char *line = text; line < text + len;) {
        char *end = memchr(line, '\n', (size_t)(text + len - line));
        if (end == NULL) end = text + len;
        *end = '\0';
        if (end > line && end[-1] == '\r') end[-1] = '\0';
        if (strncmp(line, "#% ", 3) == 0) {
            char *key = line + 3, *value = strchr(key, ' ');
            if (value != NULL) {
                *value++ = '\0';
                char **slot = strcmp(key, "python") == 0      ? &s->python
                              : strcmp(key, "socket") == 0    ? &s->socket
                              : strcmp(key, "log_dir") == 0   ? &s->log_dir
                              : strcmp(key, "policy") == 0    ? &s->policy
                              : strcmp(key, "cache_dir") == 0 ? &s->cache_dir
                              : strcmp(key, "wait_s") == 0    ? &s->wait_s
                                                              : NULL;
                if (slot != NULL && *slot == NULL && *value != '\0') *slot = strdup(value);
            }
        }
        line = end + 1;
    }
    free(text);
}

/* ---- the daemon: HTTP on its socket (jlib/http.c) ------------------------------------- */

static const char *g_socket; /* JANITOR_RUNTIME_DIR's janitor.sock, else the settings' socket */

/* One request to the daemon, one answer: see http_call. */
static int http(const char *method, const char *url, const char *body, int timeout_ms,
                struct http_answer *ans, struct buf *why) {
    return http_call(g_socket, method, url, body, timeout_ms, ans, why);
}

/* ---- handing over ---------------------------------------------------------------------- */

static char **g_args; /* ffmpeg's arguments (argv + 1) */
static int g_nargs;
static int64_t g_started; /* now_ms() as we started: the call's wait counts from then */
static const char *g_real;
static struct settings g_set;

/* The real program's argv for execv: its path, then our arguments. NULL (errno ENOMEM) when it
 * cannot be allocated. */
static char **real_argv(void) {
    char **argv = calloc((size_t)g_nargs + 2, sizeof *argv);
    if (argv == NULL) { errno = ENOMEM; return NULL; }
    argv[0] = (char *)g_real;
    for (int i = 0; i < g_nargs; i++) argv[i + 1] = g_args[i];
    return argv;
}

/* Exec the real program with `argv`; where that fails, say why in one line and return. */
static void exec_argv(char **argv) {
    execv(g_real, argv);
    struct buf line = {0};
    buf_fmt(&line, "cannot run %s: %s", g_real, strerror(errno));
    say(line.failed ? "cannot run the real program" : line.p);
}

static _Noreturn void exec_real(void) {
    char **argv = real_argv();
    if (argv == NULL) { say("out of memory"); exit(EXIT_NO_FFMPEG); }
    exec_argv(argv);
    exit(EXIT_NO_FFMPEG);
}

/* Exec the Python guard (ffmpeg.guard, run by the settings' python), telling it why and how
 * long the call has taken (it waits only for what is left of the call's wait); without one,
 * the real ffmpeg as it is. */
static _Noreturn void hand_over(const char *why) {
    if (g_set.python != NULL && g_set.sidecar != NULL) {
        char **argv = calloc((size_t)g_nargs + 4, sizeof *argv);
        char elapsed[32];
        int64_t spent = now_ms() - g_started;
        if (spent < 0) spent = 0;
        (void)snprintf(elapsed, sizeof elapsed, "%lld.%03lld", (long long)(spent / 1000),
                       (long long)(spent % 1000));
        if (argv != NULL && setenv(FALLBACK_ENV, why ? why : "", 1) == 0 &&
            setenv(ELAPSED_ENV, elapsed, 1) == 0) {
            argv[0] = g_set.python;
            argv[1] = "-IS";
            argv[2] = g_set.sidecar;
            for (int i = 0; i < g_nargs; i++) argv[i + 3] = g_args[i];
            execv(g_set.python, argv);
        }
        (void)unsetenv(FALLBACK_ENV);
        (void)unsetenv(ELAPSED_ENV);
        free(argv);
        struct buf line = {0};
        buf_fmt(&line, "unguarded (the Python guard %s cannot run: %s): ffmpeg", g_set.python,
                strerror(errno));
        log_line(line.failed ? NULL : line.p, 0);
        buf_free(&line);
    }
    exec_real();
}

/* ---- supervising ffmpeg ---------------------------------------------------------------- */

static const int FORWARDED[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED ((int)(sizeof FORWARDED / sizeof FORWARDED[0]))

static volatile sig_atomic_t g_child;      /* ffmpeg's pid once started, 0 before and after */
static volatile sig_atomic_t g_foreground; /* ffmpeg stays in our group (a terminal's job) */
static volatile sig_atomic_t g_early;      /* signals that came before ffmpeg started (bits) */
static volatile sig_atomic_t g_passed;     /* a signal that came for the running child, or 0 */
static int g_wake[2] = {-1, -1};           /* the self-pipe: a signal came */
static struct sigaction g_saved[NSIG];     /* what the signals we handle were before */
static int g_handled[NSIG];

static int bit_of(int sig) {
    for (int i = 0; i < NFORWARDED; i++)
        if (FORWARDED[i] == sig) return 1 << i;
    return sig == SIGCONT ? 1 << NFORWARDED : 0;
}

static void send_to_child(int sig) {
    pid_t pid = (pid_t)g_child;
    if (pid <= 0) return;
    (void)kill(g_foreground ? pid : -pid, sig);
}

static void on_signal(int sig) {
    int saved = errno;
    if (sig == SIGTSTP) {
        send_to_child(SIGSTOP); /* stop ffmpeg, then us: the shell sees a stopped job */
        (void)kill(getpid(), SIGSTOP);
    } else if (sig != SIGCHLD) {
        if (g_child <= 0) {
            g_early |= bit_of(sig);
        } else {
            g_passed = sig;
            if (!(g_foreground && (sig == SIGINT || sig == SIGQUIT) &&
                  tcgetpgrp(0) == getpgrp())) {
                /* A terminal's Ctrl-C reached ffmpeg in our group already: not sent twice. */
                send_to_child(sig);
            }
        }
    }
    if (g_wake[1] >= 0) {
        char c = (char)sig;
        if (write(g_wake[1], &c, 1) < 0) { /* full: the loop wakes anyway */ }
    }
    errno = saved;
}

static int handle(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, &g_saved[sig]) != 0) return -1;
    g_handled[sig] = 1;
    return 0;
}

static void restore_signals(void) {
    for (int sig = 1; sig < NSIG; sig++)
        if (g_handled[sig]) {
            (void)sigaction(sig, &g_saved[sig], NULL);
            g_handled[sig] = 0;
        }
}

static int cloexec_pipe(int fds[2]) {
    if (pipe(fds) != 0) return -1;
    for (int i = 0; i < 2; i++)
        if (fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0) {
            int saved = errno;
            (void)close(fds[0]);
            (void)close(fds[1]);
            errno = saved;
            return -1;
        }
    return 0;
}

/* The self-pipe's two ends: close-on-exec and non-blocking (a handler never blocks on it). */
static int nonblocking_pipe(int fds[2]) {
    if (cloexec_pipe(fds) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(fds[i], F_GETFL);
        if (fl < 0 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) != 0) {
            (void)close(fds[0]);
            (void)close(fds[1]);
            return -1;
        }
    }
    return 0;
}

static int portable(void) {
    const char *v = getenv("JANITOR_PORTABLE");
    return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

/* Whether the real program is to die with us (PR_SET_PDEATHSIG): on Linux, but not in the
 * portable mode, which runs as on macOS (the sentinel alone, or SIGPIPE). Asked before fork. */
static int dies_with_us(void) {
#ifdef __linux__
    return !portable();
#else
    return 0;
#endif
}

/* In the child, before exec: arm its death with `parent` (SIGKILL), and die now if the parent
 * died before that took effect. 0, or -1 if the kernel refused. */
static int arm_death(pid_t parent, int wanted) {
#ifdef __linux__
    if (wanted) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return -1;
        if (getppid() != parent) raise(SIGKILL);
    }
#else
    (void)parent;
    (void)wanted;
#endif
    return 0;
}

/* fork + exec of the real ffmpeg, armed first: its own group (unless in a terminal's
 * foreground), pdeathsig on Linux, the signal dispositions and mask we were given. Returns
 * its pid, or -1 with errno (exec failed). */
static pid_t start_ffmpeg(const sigset_t *given_mask) {
    int err[2];
    if (cloexec_pipe(err) != 0) return -1;
    pid_t parent = getpid();
    int deathsig = dies_with_us();
    char **argv = real_argv();
    if (argv == NULL) { (void)close(err[0]); (void)close(err[1]); errno = ENOMEM; return -1; }
    pid_t pid = fork();
    if (pid < 0) { free(argv); (void)close(err[0]); (void)close(err[1]); return -1; }
    if (pid == 0) {
        (void)close(err[0]);
        if (arm_death(parent, deathsig) != 0) _exit(127);
        if (!g_foreground) (void)setpgid(0, 0);
        for (int sig = 1; sig < NSIG; sig++)
            if (g_handled[sig]) (void)sigaction(sig, &g_saved[sig], NULL);
        (void)sigprocmask(SIG_SETMASK, given_mask, NULL);
        execv(g_real, argv);
        int e = errno;
        if (write(err[1], &e, sizeof e) < 0) { /* the parent then sees EOF: exit 127 */ }
        _exit(127);
    }
    free(argv);
    g_child = (sig_atomic_t)pid;
    if (!g_foreground) (void)setpgid(pid, pid); /* from both sides: a signal sent now reaches it */
    (void)close(err[1]);
    int e = 0;
    ssize_t n;
    while ((n = read(err[0], &e, sizeof e)) < 0 && errno == EINTR) {}
    (void)close(err[0]);
    if (n == (ssize_t)sizeof e) {
        g_child = 0;
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        errno = e;
        return -1;
    }
    return pid;
}

/* The sentinel: a fork of ours in a session of its own, blocked reading a pipe whose write end
 * only we hold. However we die, the read returns at EOF without the word, and it kills
 * ffmpeg (its group) with SIGKILL. */
static pid_t start_sentinel(pid_t target, int *word) {
    int fds[2];
    *word = -1;
    if (cloexec_pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) { (void)close(fds[0]); (void)close(fds[1]); return -1; }
    if (pid == 0) {
        (void)close(fds[1]);
        if (g_wake[0] >= 0) (void)close(g_wake[0]);
        if (g_wake[1] >= 0) (void)close(g_wake[1]);
        (void)setsid();
        struct sigaction ign, dfl;
        memset(&ign, 0, sizeof ign);
        memset(&dfl, 0, sizeof dfl);
        ign.sa_handler = SIG_IGN;
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; sig++)
            if (g_handled[sig]) (void)sigaction(sig, &dfl, NULL);
        const int ignored[] = {SIGINT, SIGQUIT, SIGHUP, SIGTERM, SIGTSTP, SIGPIPE};
        for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
            (void)sigaction(ignored[i], &ign, NULL);
        sigset_t none;
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            for (int fd = 0; fd < 3; fd++) (void)dup2(null, fd);
            if (null > 2) (void)close(null);
        }
#ifdef PR_SET_NAME
        (void)prctl(PR_SET_NAME, "janitor-sentinel", 0, 0, 0); /* cut to 15 */
#endif
        char got[8];
        size_t have = 0;
        for (;;) {
            ssize_t n = read(fds[0], got + have, sizeof got - have);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            have += (size_t)n;
            if (have >= 4) break;
        }
        if (!(have >= 4 && memcmp(got, "done", 4) == 0))
            (void)kill(g_foreground ? target : -target, SIGKILL);
        _exit(0);
    }
    (void)close(fds[0]);
    *word = fds[1];
    return pid;
}

/* Wait for `pid` to end, up to `ms` (negative: for ever); its status, or -1 if it still runs. */
static int reap(pid_t pid, int ms, int *status) {
    int64_t deadline = now_ms() + (ms < 0 ? 0 : ms);
    for (int delay = 1;; delay = delay < 50 ? delay * 2 : 50) {
        pid_t r = waitpid(pid, status, ms < 0 ? 0 : WNOHANG);
        if (r == pid) return 0;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { *status = 0; return 0; } /* not ours any more */
        if (now_ms() >= deadline) return -1;
        sleep_ms(delay);
    }
}

/* Wait up to `ms` for the sentinel to end, woken by SIGCHLD on the self-pipe (no polling
 * delay); one that does not end (stopped by someone) is left to init. */
static void reap_sentinel(pid_t pid, int ms) {
    int64_t deadline = now_ms() + ms;
    for (;;) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) return;
        int64_t left = deadline - now_ms();
        if (left <= 0) return;
        struct pollfd pfd = {g_wake[0], POLLIN, 0};
        if (poll(&pfd, 1, left > 50 ? 50 : (int)left) > 0) {
            char drain[64];
            while (read(g_wake[0], drain, sizeof drain) > 0) {}
        }
    }
}

/* Whether ffmpeg has ended, without reaping it where the system can (Linux's waitid WNOWAIT),
 * so the sentinel is told before the pid is free for another process. */
static int child_ended(pid_t pid, int *status, int *reaped) {
#if defined(__linux__) && defined(WNOWAIT)
    if (!portable()) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
            return si.si_pid == pid;
        if (errno == ECHILD) { *status = 0; *reaped = 1; return 1; }
        return 0;
    }
#endif
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) { *reaped = 1; return 1; }
    if (r < 0 && errno == ECHILD) { *status = 0; *reaped = 1; return 1; }
    return 0;
}

/* ---- one write the call holds ---------------------------------------------------------- */

struct held {
    char *rid, *output;
    double allowed, floor;
    int pooled;
    int existed; /* the output was there before ffmpeg ran: (ino, mtime) below */
    ino_t ino;
    long long mtime_ns;
};

static int identity(const char *path, ino_t *ino, long long *mtime_ns) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    *ino = st.st_ino;
#ifdef __APPLE__
    *mtime_ns = (long long)st.st_mtimespec.tv_sec * 1000000000LL + st.st_mtimespec.tv_nsec;
#else
    *mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
#endif
    return 1;
}

/* Changed since `h` was taken (or new): what ffmpeg began or wrote there. */
static int touched(const struct held *h, off_t *size) {
    struct stat st;
    ino_t ino;
    long long mt;
    if (!identity(h->output, &ino, &mt) || lstat(h->output, &st) != 0) return 0;
    if (size) *size = st.st_size;
    return !(h->existed && ino == h->ino && mt == h->mtime_ns);
}

/* Why the reservation behind `h` is at risk (the daemon's words), or NULL. */
static char *at_risk(const struct held *h) {
    struct buf url = {0}, why = {0};
    struct http_answer ans;
    char *reason = NULL;
    buf_str(&url, "/v1/reservations/");
    http_url_escape(&url, h->rid);
    if (!url.failed && http("GET", url.p, NULL, RISK_MS, &ans, &why) == 0) {
        const char *end = ans.body.p + ans.body.len;
        if (ans.status == 200 && json_skip_value(ans.body.p, end, 0) != NULL)
            reason = json_get_string(ans.body.p, end, "at_risk");
        buf_free(&ans.body);
    }
    buf_free(&url);
    buf_free(&why);
    return reason;
}

/* Whether the volume of a held write's output is below its floor now (statvfs). */
static int below_floor(const struct held *h) {
    char folder[PATH_MAX];
    const char *slash = strrchr(h->output, '/');
    size_t n = slash == NULL ? 0 : (size_t)(slash - h->output);
    if (slash == h->output) n = 1;
    if (n == 0) strcpy(folder, ".");
    else if (n < sizeof folder) { memcpy(folder, h->output, n); folder[n] = '\0'; }
    else return 0;
    struct statvfs vs;
    if (statvfs(folder, &vs) != 0) return 0;
    return (double)vs.f_bavail * (double)vs.f_frsize < h->floor;
}

/* Why a failed ffmpeg counts as stopped (janitor.commands.watch, Watch.fell_below): it exited
 * with an error while an output's volume was below its floor, so writers outside every
 * reservation took the space it was promised. NULL otherwise. */
static char *failed_below_floor(const struct held *w, int nw, int status) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 0) return NULL;
    for (int i = 0; i < nw; i++) {
        if (!below_floor(&w[i])) continue;
        struct buf line = {0};
        buf_fmt(&line, "stopped ffmpeg writing %s: its volume fell below its floor while it "
                "wrote (writers outside every reservation took the space)", w[i].output);
        return line.failed ? strdup("stopped ffmpeg: its volume fell below its floor") : line.p;
    }
    return NULL;
}

/* Until ffmpeg ends: why it must stop (its output past the reservation, the reservation at
 * risk), else NULL; `status` is its wait status then. janitor.commands.watch.Watch, in C. */
static char *watch(pid_t pid, struct held *w, int nw, int *status, int *reaped) {
    int64_t checked = 0, tick = now_ms() + POLL_MS;
    for (;;) {
        int64_t left = tick - now_ms();
        struct pollfd pfd = {g_wake[0], POLLIN, 0};
        if (poll(&pfd, 1, left < 0 ? 0 : (int)left) > 0) {
            char drain[64];
            while (read(g_wake[0], drain, sizeof drain) > 0) {}
        }
        if (child_ended(pid, status, reaped)) return NULL;
        if (now_ms() < tick) continue; /* woken by a signal: the tick has not come yet */
        tick = now_ms() + POLL_MS;
        for (int i = 0; i < nw; i++) {
            struct stat st;
            double written = stat(w[i].output, &st) == 0 ? (double)st.st_blocks * 512.0 : 0.0;
            if (written > w[i].allowed * (1 + MARGIN) + SLACK) {
                char a[32], b[32];
                struct buf line = {0};
                format_size(a, sizeof a, written);
                format_size(b, sizeof b, w[i].allowed);
                buf_fmt(&line, "stopped ffmpeg: %s reached %s, past the %s %s", w[i].output, a,
                        b, w[i].pooled ? "its job has left of its working set" : "reserved for it");
                return line.failed ? strdup("stopped ffmpeg: past its reservation") : line.p;
            }
            if (!below_floor(&w[i])) continue; /* above the floor nobody is at risk */
            int64_t t = now_ms();
            if (t - checked < POLL_MS) continue;
            checked = t;
            char *reason = at_risk(&w[i]);
            if (reason != NULL && *reason != '\0') {
                struct buf line = {0};
                buf_fmt(&line, "stopped ffmpeg writing %s: %s", w[i].output, reason);
                free(reason);
                return line.failed ? strdup("stopped ffmpeg: its job is at risk") : line.p;
            }
            free(reason);
        }
    }
}

/* SIGTERM, then SIGKILL after the grace; returns once it ended (not reaped on Linux). */
static void stop_child(pid_t pid, int *status, int *reaped) {
    send_to_child(SIGTERM);
    int64_t deadline = now_ms() + STOP_GRACE_MS;
    while (now_ms() < deadline) {
        if (child_ended(pid, status, reaped)) return;
        sleep_ms(10);
    }
    send_to_child(SIGKILL);
    while (!child_ended(pid, status, reaped)) sleep_ms(10);
}

/* ---- the call -------------------------------------------------------------------------- */

static int asks_only_for_information(void) {
    if (g_nargs == 0) return 1;
    for (int i = 0; INFO_OPTIONS[i]; i++)
        if (strcmp(g_args[0], INFO_OPTIONS[i]) == 0) return 1;
    return 0;
}

/* The body of POST /v1/guard/call (or /v1/guard/probe, with the variables `names`); NULL
 * (with `why`) when a word is not UTF-8 text. */
static char *call_body(const char *cwd, const char *const *names, struct buf *why) {
    struct buf b = {0};
    if (!json_valid_utf8(cwd)) { buf_str(why, "its folder's name is not UTF-8"); return NULL; }
    buf_str(&b, "{\"args\":[");
    for (int i = 0; i < g_nargs; i++) {
        if (!json_valid_utf8(g_args[i])) {
            buf_free(&b);
            buf_fmt(why, "argument %d is not UTF-8", i + 1);
            return NULL;
        }
        if (i) buf_add(&b, ",", 1);
        json_put_string(&b, g_args[i]);
    }
    buf_str(&b, "],\"cwd\":");
    json_put_string(&b, cwd);
    buf_fmt(&b, ",\"owner_pid\":%ld", (long)getpid());
    pid_t ppid = getppid();
    if (ppid > 0) buf_fmt(&b, ",\"writer_pid\":%ld", (long)ppid);
    buf_fmt(&b, ",\"%s\":", g_name);
    json_put_string(&b, g_real);
    buf_str(&b, ",\"env\":{");
    int first = 1;
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v == NULL) continue;
        if (!json_valid_utf8(v)) {
            buf_free(&b);
            buf_fmt(why, "%s is not UTF-8", names[i]);
            return NULL;
        }
        if (!first) buf_add(&b, ",", 1);
        first = 0;
        json_put_string(&b, names[i]);
        buf_add(&b, ":", 1);
        json_put_string(&b, v);
    }
    buf_str(&b, "},\"config\":{");
    const char *keys[] = {"policy", "cache_dir", "wait_s"};
    const char *values[] = {g_set.policy, g_set.cache_dir, g_set.wait_s};
    first = 1;
    for (int i = 0; i < 3; i++) {
        if (values[i] == NULL || !json_valid_utf8(values[i])) continue;
        if (!first) buf_add(&b, ",", 1);
        first = 0;
        json_put_string(&b, keys[i]);
        buf_add(&b, ":", 1);
        json_put_string(&b, values[i]);
    }
    buf_str(&b, "}}");
    if (b.failed || b.len > MAX_REQUEST) {
        buf_free(&b);
        buf_str(why, "the call is too large to send");
        return NULL;
    }
    return b.p;
}

static int call_timeout_ms(void) {
    const char *v = getenv("JANITOR_GUARD_TIMEOUT_S");
    if (v != NULL && *v) {
        char *stop;
        double s = strtod(v, &stop);
        if (*stop == '\0' && s > 0 && s <= 86400) return (int)(s * 1000);
    }
    return CALL_MS_DEFAULT;
}

/* A verdict we understand: its action, else NULL (then the Python guard takes the call). */
static char *understood(const struct http_answer *ans, struct buf *why) {
    const char *p = ans->body.p, *end = p + ans->body.len;
    const char *stop = p ? json_skip_value(p, end, 0) : NULL;
    char *action = NULL;
    if (stop != NULL && json_skip_ws(stop, end) == end) action = json_get_string(p, end, "action");
    int known = action != NULL &&
                ((ans->status == 200 && (!strcmp(action, "exec") || !strcmp(action, "run"))) ||
                 (ans->status == 202 && !strcmp(action, "wait")) ||
                 (ans->status == 507 && !strcmp(action, "refuse")));
    if (known) return action;
    free(action);
    char *message = stop != NULL ? json_get_string(p, end, "message") : NULL;
    buf_fmt(why, "the daemon at %s did not take this call (%d: %s)", g_socket, ans->status,
            message ? message : stop == NULL ? "an answer that is not JSON" : "no verdict");
    free(message);
    return NULL;
}

/* The writes of a "run" verdict; -1 when they are not what we understand. */
static int read_writes(const char *p, const char *end, struct held **out, int *n) {
    const char *session = json_get(p, end, "session");
    const char *list = session ? json_get(session, end, "reservations") : NULL;
    *out = NULL;
    *n = 0;
    if (list == NULL || *list != '[') return -1;
    const char *q = json_skip_ws(list + 1, end);
    int cap = 0;
    while (q < end && *q != ']') {
        const char *e = json_skip_value(q, end, 1);
        if (e == NULL || *q != '{') return -1;
        if (*n == cap) {
            cap = cap ? cap * 2 : 4;
            if (cap > 4096) return -1;
            struct held *grown = realloc(*out, (size_t)cap * sizeof **out);
            if (grown == NULL) return -1;
            *out = grown;
        }
        struct held *h = &(*out)[*n];
        memset(h, 0, sizeof *h);
        h->rid = json_get_string(q, e, "id");
        h->output = json_get_string(q, e, "output");
        h->pooled = json_get_bool(q, e, "pooled");
        if (h->rid == NULL || h->output == NULL || json_get_number(q, e, "bytes", &h->allowed) ||
            json_get_number(q, e, "floor", &h->floor)) {
            free(h->rid);
            free(h->output);
            return -1;
        }
        (*n)++;
        q = json_skip_ws(e, end);
        if (q < end && *q == ',') q = json_skip_ws(q + 1, end);
    }
    return 0;
}

/* Say and log what the verdict says to. */
static void tell(const char *p, const char *end) {
    char *line = json_get_string(p, end, "say");
    if (line != NULL) say(line);
    free(line);
    line = json_get_string(p, end, "log");
    if (line != NULL) log_line(line, json_get_bool(p, end, "debug"));
    free(line);
}

static void cover(const struct held *w, int nw, pid_t pid, int *fd_out) {
    /* Not waited for: the guard owns the reservations too, and ffmpeg dies with the guard. */
    struct buf req = {0}, why = {0};
    *fd_out = -1;
    for (int i = 0; i < nw; i++) {
        if (w[i].pooled) continue;
        struct buf url = {0}, body = {0};
        buf_str(&url, "/v1/reservations/");
        http_url_escape(&url, w[i].rid);
        buf_str(&url, "/cover");
        buf_fmt(&body, "{\"pid\":%ld}", (long)pid);
        if (!url.failed && !body.failed) http_request_text(&req, "POST", url.p, body.p, 0);
        buf_free(&url);
        buf_free(&body);
    }
    if (req.len > 0 && !req.failed) {
        int fd = http_connect(g_socket, now_ms() + HTTP_CONNECT_MS, &why);
        int sent = fd >= 0 && http_send_all(fd, req.p, req.len, now_ms() + HTTP_CONNECT_MS) == 0;
        if (sent) *fd_out = fd;
        else if (fd >= 0) (void)close(fd);
    }
    buf_free(&req);
    buf_free(&why);
}

/* Die of `sig` as a process with its default action does; 128 + sig should we live on. */
static int die_of(int sig) {
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    (void)sigprocmask(SIG_UNBLOCK, &one, NULL);
    (void)kill(getpid(), sig);
    return 128 + sig;
}

static int finish(int status) {
    if (WIFSIGNALED(status)) return die_of(WTERMSIG(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* End what the daemon granted for this call (its "release" body), before the call goes to
 * the Python guard, which holds it anew, or fails. */
static void release_granted(const char *release, const char *release_end) {
    struct buf body = {0}, why = {0};
    struct http_answer ans;
    buf_add(&body, release, (size_t)(release_end - release));
    if (!body.failed && http("POST", "/v1/guard/release", body.p, RELEASE_MS, &ans, &why) == 0)
        buf_free(&ans.body);
    buf_free(&body);
    buf_free(&why);
}

static int run(const char *p, const char *end, const sigset_t *given_mask) {
    struct held *w = NULL;
    int nw = 0;
    const char *release = json_get(p, end, "release");
    const char *release_end = release ? json_skip_value(release, end, 1) : NULL;
    if (release == NULL || release_end == NULL || *release != '{')
        hand_over("the daemon's answer has no release");
    if (read_writes(p, end, &w, &nw) != 0) {
        /* What the daemon granted ends first: the Python guard will hold the call itself. */
        release_granted(release, release_end);
        hand_over("the daemon's session is not one the compiled front end understands");
    }
    int holds = json_get_bool(p, end, "holds");
    tell(p, end);
    for (int i = 0; i < nw; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= strcmp(w[i].output, w[j].output) == 0;
        if (!dup) w[i].existed = identity(w[i].output, &w[i].ino, &w[i].mtime_ns);
        else w[i].existed = -1; /* the same output again: counted once */
    }

    g_foreground = isatty(0) && tcgetpgrp(0) == getpgrp();
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < NFORWARDED; i++) sigaddset(&block, FORWARDED[i]);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGTSTP);
    sigaddset(&block, SIGCONT);
    int wake_ok = nonblocking_pipe(g_wake) == 0;
    /* The handlers go in before ffmpeg starts: a signal that comes meanwhile is passed on the
     * moment it runs. Held back across the fork, so the pid is known when one arrives. */
    (void)sigprocmask(SIG_BLOCK, &block, &old);
    int armed = wake_ok && handle(SIGCHLD) == 0;
    for (int i = 0; armed && i < NFORWARDED; i++) armed = handle(FORWARDED[i]) == 0;
    if (armed && !g_foreground) armed = handle(SIGTSTP) == 0 && handle(SIGCONT) == 0;
    if (!armed) {
        restore_signals();
        (void)sigprocmask(SIG_SETMASK, &old, NULL);
        release_granted(release, release_end);
        hand_over("cannot set up signal handling");
    }
    pid_t pid = start_ffmpeg(given_mask);
    if (pid < 0) {
        int e = errno;
        restore_signals();
        (void)sigprocmask(SIG_SETMASK, &old, NULL);
        struct buf line = {0};
        if (holds) release_granted(release, release_end);
        buf_fmt(&line, "cannot run %s: %s", g_real, strerror(e));
        say(line.failed ? "cannot run the real ffmpeg" : line.p);
        return EXIT_NO_FFMPEG;
    }
    /* The sentinel is forked while the signals are still held back, so that none reaches it
     * before it has reset its handlers (it would pass it on to ffmpeg a second time), and so
     * that ffmpeg is watched from the moment it runs. None (fork failed): on Linux pdeathsig
     * still holds. */
    int word = -1;
    pid_t sentinel = start_sentinel(pid, &word);
    int early = g_early;
    g_early = 0;
    (void)sigprocmask(SIG_SETMASK, &old, NULL);
    for (int i = 0; i < NFORWARDED; i++)
        if (early & (1 << i)) send_to_child(FORWARDED[i]);
    int cover_fd = -1;
    cover(w, nw, pid, &cover_fd);

    int status = 0, reaped = 0;
    char *stopped = watch(pid, w, nw, &status, &reaped);
    if (stopped != NULL) stop_child(pid, &status, &reaped);
    /* Tell the sentinel before the pid is reaped (it exits as soon as it reads the word), then
     * reap both. */
    if (word >= 0) {
        while (write(word, "done\n", 5) < 0 && errno == EINTR) {}
        (void)close(word);
    }
    if (sentinel > 0) reap_sentinel(sentinel, 5000);
    if (!reaped) (void)reap(pid, -1, &status);
    if (stopped == NULL) stopped = failed_below_floor(w, nw, status);
    g_child = 0;
    restore_signals();
    if (cover_fd >= 0) (void)close(cover_fd);

    int removed = 0;
    if (stopped != NULL) {
        for (int i = 0; i < nw; i++) {
            if (w[i].existed < 0 || !touched(&w[i], NULL)) continue;
            if (unlink(w[i].output) == 0) removed = 1;
        }
    }
    struct buf body = {0}, why = {0};
    int nwritten = 0;
    buf_add(&body, release, (size_t)(release_end - release - 1)); /* without its "}" */
    const char *inner = json_skip_ws(release + 1, release_end);
    buf_str(&body, *inner == '}' ? "\"written\":[" : ",\"written\":[");
    for (int i = 0; i < nw; i++) {
        off_t size = 0;
        if (w[i].existed < 0 || !touched(&w[i], &size)) continue;
        if (!json_valid_utf8(w[i].output)) continue;
        if (nwritten++) buf_add(&body, ",", 1);
        buf_str(&body, "{\"path\":");
        json_put_string(&body, w[i].output);
        buf_fmt(&body, ",\"bytes\":%lld}", (long long)size);
    }
    buf_str(&body, "]}");
    if ((holds || nwritten) && !body.failed) {
        struct http_answer ans;
        if (http("POST", "/v1/guard/release", body.p, RELEASE_MS, &ans, &why) == 0)
            buf_free(&ans.body);
        /* else: ended with us, the owner, once we exit */
    }
    buf_free(&body);
    buf_free(&why);
    if (stopped != NULL) {
        struct buf line = {0};
        buf_fmt(&line, "%s%s. Free space there (`janitor status` shows the volume) and retry",
                stopped, removed ? "; the partial output was removed" : "");
        say(line.failed ? stopped : line.p);
        log_line(line.failed ? stopped : line.p, 0);
        return EXIT_REFUSED;
    }
    return finish(status);
}

/* The name a path ends with. */
static const char *base_name(const char *path) {
    const char *slash = path ? strrchr(path, '/') : NULL;
    return slash ? slash + 1 : path ? path : "";
}

/* ---- the guarded ffprobe ---------------------------------------------------------------- */

/* Whether an argument makes ffprobe read our stdin (`-`, `pipe:`, `fd:`) or write a file of
 * its own (`-o`, `-report`): what a refused or handed-over probe must not have used up or
 * written before the answer. */
static int reads_stdin_or_writes(void) {
    for (int i = 0; i < g_nargs; i++) {
        const char *a = g_args[i];
        if (!strcmp(a, "-") || !strncmp(a, "pipe:", 5) || !strncmp(a, "fd:", 3) ||
            !strcmp(a, "-o") || !strcmp(a, "-report"))
            return 1;
    }
    const char *report = getenv("FFREPORT");
    return report != NULL && *report != '\0';
}

/* Whether our children are reaped by us: not with SIGCHLD ignored (inherited across exec from
 * a parent that ignores it), when the kernel reaps them and ffprobe's status would be lost. */
static int children_reaped_by_us(void) {
    struct sigaction sa;
    if (sigaction(SIGCHLD, NULL, &sa) != 0) return 0;
    return sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_NOCLDWAIT);
}

/* Whether the real ffprobe may start while the daemon decides (its answer then costs the call
 * next to nothing: it comes while ffprobe loads): a daemon is there; ffprobe's stdout is open
 * and not a terminal (a person reading it does not count the milliseconds, and a terminal
 * keeps ffprobe's own pace and colours); it neither reads our stdin nor writes a file of its
 * own; and its status will be ours to read. Otherwise it starts after the answer, exec'd. */
static int may_overlap(void) {
    struct stat st, out;
    return g_socket != NULL && stat(g_socket, &st) == 0 && S_ISSOCK(st.st_mode) &&
           fstat(1, &out) == 0 && !isatty(1) && !reads_stdin_or_writes() &&
           children_reaped_by_us();
}

/* Whether our stdout and stderr are one file (2>&1): ffprobe's two streams then share the
 * held pipe, so what it wrote keeps its order. */
static int one_output(void) {
    struct stat o, e;
    return fstat(1, &o) == 0 && fstat(2, &e) == 0 && o.st_dev == e.st_dev && o.st_ino == e.st_ino;
}

/* The real ffprobe, started now with its stdout (and its stderr, when they are one file) into
 * a pipe whose read end is `*held`: nothing it writes there reaches our caller before the
 * verdict lets it (a refused probe shows nothing of it). It has our stdin, arguments,
 * environment, signal dispositions and mask, and dies with us (PR_SET_PDEATHSIG on Linux;
 * elsewhere at its next write once we are gone: SIGPIPE). Its pid, or -1. */
static pid_t start_held_probe(int *held, const sigset_t *given_mask) {
    int out[2];
    if (cloexec_pipe(out) != 0) return -1;
    int both = one_output();
    pid_t parent = getpid();
    int deathsig = dies_with_us();
    char **argv = real_argv();
    pid_t pid = argv == NULL ? -1 : fork();
    if (pid == 0) {
        if (arm_death(parent, deathsig) != 0) _exit(EXIT_NO_FFMPEG);
        if (dup2(out[1], 1) < 0 || (both && dup2(out[1], 2) < 0)) _exit(EXIT_NO_FFMPEG);
        (void)sigprocmask(SIG_SETMASK, given_mask, NULL);
        exec_argv(argv);
        _exit(EXIT_NO_FFMPEG);
    }
    free(argv);
    (void)close(out[1]);
    if (pid < 0) { (void)close(out[0]); return -1; }
    *held = out[0];
    return pid;
}

/* What ffprobe wrote and writes to its held pipe, passed on to our stdout to its end. A
 * stdout nobody reads ends us as it would have ended ffprobe (SIGPIPE; ffprobe then dies
 * with us). */
static void pass_on(int held) {
    char chunk[65536];
    for (;;) {
        ssize_t n = read(held, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(1, chunk + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) { (void)close(held); return; } /* EPIPE with SIGPIPE ignored */
            off += w;
        }
    }
    (void)close(held);
}

/* The held ffprobe's end: its status once it has ended (signals we were sent were passed on
 * to it meanwhile). */
static int reap_probe(pid_t pid) {
    int status = 0;
#if defined(__linux__) && defined(WNOWAIT)
    /* Ended, not yet reaped: its pid is still its own while signals may be passed to it
     * (macOS's waitid is not trusted with WNOWAIT: there the window stays, a few µs). */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
#endif
    g_child = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    restore_signals();
    return status;
}

/* The guarded ffprobe: the daemon marks what it probes (or refuses a hopeless one). The real
 * ffprobe runs meanwhile, its output held until the answer lets it out (may_overlap), or, where
 * it may not, is exec'd once the answer came. Without a daemon, or an answer we do not
 * understand: the Python guarded ffprobe beside us decides through the ledger (a held ffprobe
 * is stopped first, unseen). */
static _Noreturn void probe(const char *cwd) {
    struct buf why = {0};
    char *body = call_body(cwd, PROBE_ENV, &why);
    if (body == NULL) hand_over(why.p);
    int held = -1;
    pid_t pid = -1;
    if (may_overlap()) {
        /* A signal that comes while ffprobe starts waits until it can be passed on. */
        sigset_t forwarded, given;
        sigemptyset(&forwarded);
        for (int i = 0; i < NFORWARDED; i++) sigaddset(&forwarded, FORWARDED[i]);
        (void)sigprocmask(SIG_BLOCK, &forwarded, &given);
        pid = start_held_probe(&held, &given);
        if (pid > 0) {
            g_child = (sig_atomic_t)pid;
            g_foreground = 1; /* in our group: a terminal's Ctrl-C reaches it without us */
            /* The self-pipe wakes the wait for the answer: a signal that lands after the
             * request is sent but before the wait blocks would otherwise be slept through. */
            if (g_wake[0] < 0 && nonblocking_pipe(g_wake) != 0) g_wake[0] = g_wake[1] = -1;
            for (int i = 0; i < NFORWARDED; i++) (void)handle(FORWARDED[i]);
            http_cancel = &g_passed; /* its caller stopping it ends the wait for the answer */
            http_cancel_fd = g_wake[0];
        }
        (void)sigprocmask(SIG_SETMASK, &given, NULL);
    }
    struct http_answer ans = {0};
    int asked = g_passed ? -1 : http("POST", "/v1/guard/probe", body, PROBE_MS, &ans, &why);
    http_cancel = NULL;
    http_cancel_fd = -1;
    free(body);
    const char *p = ans.body.p, *end = p + ans.body.len;
    const char *stop = asked == 0 && p ? json_skip_value(p, end, 0) : NULL;
    char *action = NULL;
    if (stop != NULL && json_skip_ws(stop, end) == end) action = json_get_string(p, end, "action");
    if (action != NULL && ans.status == 200 && !strcmp(action, "exec")) {
        tell(p, end);
        if (pid <= 0) exec_real();
        pass_on(held);
        exit(finish(reap_probe(pid)));
    }
    if (pid > 0 && g_passed) {
        /* Its caller signalled it while the answer was awaited: the call ends by that signal,
         * as ffprobe ended by it (never refused, nor run again by the Python guard), unseen. */
        int sig = (int)g_passed;
        (void)close(held);
        int status = reap_probe(pid);
        exit(WIFSIGNALED(status) ? finish(status) : die_of(sig));
    }
    if (pid > 0) { /* refused, or handed over: what it wrote is never seen */
        (void)kill(pid, SIGKILL);
        (void)close(held);
        (void)reap_probe(pid);
    }
    if (action != NULL && ans.status == 507 && !strcmp(action, "refuse")) {
        tell(p, end);
        exit(EXIT_REFUSED);
    }
    if (asked != 0) hand_over(why.p);
    buf_fmt(&why, "the daemon at %s did not take this probe (%d)", g_socket, ans.status);
    hand_over(why.failed ? "the daemon did not take this probe" : why.p);
}

int main(int argc, char **argv) {
    g_started = now_ms();
    sigset_t given_mask;
    (void)sigprocmask(SIG_SETMASK, NULL, &given_mask);
    g_args = argv + 1;
    g_nargs = argc > 0 ? argc - 1 : 0;
    char *self = self_path(argc > 0 ? argv[0] : NULL);
    if (!strcmp(base_name(self), "ffprobe") || (argc > 0 && !strcmp(base_name(argv[0]), "ffprobe")))
        g_name = "ffprobe";
    struct buf why = {0};
    const char *error = NULL;
    char *real = find_real(self, &error, &why);
    if (real == NULL) {
        say(error);
        return EXIT_NO_FFMPEG;
    }
    g_real = real;
    if (asks_only_for_information()) exec_real(); /* not logged: hundreds per recording */
    read_settings(self, &g_set);
    if (g_set.sidecar == NULL) exec_real(); /* no settings: nothing to guard with */
    const char *log_env = getenv("JANITOR_LOG_DIR");
    g_log_dir = log_env != NULL && *log_env ? log_env : g_set.log_dir;

    const char *runtime = getenv("JANITOR_RUNTIME_DIR");
    struct buf sock = {0};
    if (runtime != NULL && *runtime) {
        buf_fmt(&sock, "%s/janitor.sock", runtime);
        g_socket = sock.failed ? NULL : sock.p;
    } else {
        g_socket = g_set.socket;
    }
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL) hand_over("cannot read the working folder");
    if (!strcmp(g_name, "ffprobe")) probe(cwd);
    char *body = call_body(cwd, CALL_ENV, &why);
    if (body == NULL) hand_over(why.p);
    struct http_answer ans;
    if (http("POST", "/v1/guard/call", body, call_timeout_ms(), &ans, &why) != 0)
        hand_over(why.p);
    free(body);
    char *action = understood(&ans, &why);
    if (action == NULL) hand_over(why.p);

    if (!strcmp(action, "wait")) {
        /* Queued: say so once, then wait in turn (the daemon answers when admitted, or
         * refuses at the call's deadline: wait_s is what is left of the call's wait). */
        const char *p = ans.body.p, *end = p + ans.body.len;
        char *ticket = json_get_string(p, end, "ticket");
        double wait_s = 0;
        (void)json_get_number(p, end, "wait_s", &wait_s);
        if (ticket == NULL) hand_over("the daemon queued the call without a ticket");
        tell(p, end);
        struct buf wait_body = {0};
        buf_str(&wait_body, "{\"ticket\":");
        json_put_string(&wait_body, ticket);
        buf_fmt(&wait_body, ",\"owner_pid\":%ld}", (long)getpid());
        buf_free(&ans.body);
        free(action);
        int ms = (int)((wait_s > 0 && wait_s < 86400 ? wait_s : 0) * 1000) + WAIT_GRACE_MS;
        if (wait_body.failed ||
            http("POST", "/v1/guard/call/wait", wait_body.p, ms, &ans, &why) != 0)
            hand_over(why.len ? why.p : "out of memory");
        buf_free(&wait_body);
        free(ticket);
        action = understood(&ans, &why);
        if (action == NULL || !strcmp(action, "wait") || !strcmp(action, "exec"))
            hand_over(why.len ? why.p : "the daemon's wait ended in what is not a verdict");
    }
    const char *p = ans.body.p, *end = p + ans.body.len;
    if (!strcmp(action, "exec")) {
        tell(p, end);
        exec_real();
    }
    if (!strcmp(action, "refuse")) {
        tell(p, end);
        return EXIT_REFUSED;
    }
    return run(p, end, &given_mask);
}
