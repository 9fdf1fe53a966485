/*
 * jlib/buf.h: growable byte buffers, shared by space-janitor's C programs (guard.c,
 * sizewalk.c). jlib is their small common library, as skalibs is s6's: each program includes
 * the .c files it needs (`#include "jlib/buf.c"`), so it is still built with one compiler
 * command over one file (janitor/host/cbuild.py hashes every file so included).
 *
 * A buffer never aborts: a failed allocation sets `failed`, every later call does nothing,
 * and the caller decides (the guard hands the call on; the size walker exits). While it has
 * not failed, `p` holds `len` bytes and a NUL after them, so text in it is a C string.
 */

#ifndef JLIB_BUF_H
#define JLIB_BUF_H

#include <stddef.h>

struct buf {
    char *p;
    size_t len, cap;
    int failed; /* an allocation failed: the content is incomplete */
};

/* Room for `more` bytes past `len` (and the NUL): 0, or -1 with `failed` set. */
int buf_reserve(struct buf *b, size_t more);
/* Append n bytes (binary or text); `s` may be NULL when n is 0. An empty buffer given 0 bytes
 * becomes "" (allocated), not NULL. */
void buf_add(struct buf *b, const void *s, size_t n);
void buf_str(struct buf *b, const char *s);
void buf_fmt(struct buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Free the bytes and make `b` an empty buffer again. */
void buf_free(struct buf *b);

/* Where `needle` first is in the n bytes at `hay` (which may hold NULs), or NULL. */
const char *mem_find(const char *hay, size_t n, const char *needle);

#endif
