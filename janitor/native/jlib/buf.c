/* jlib/buf.c: growable byte buffers (see buf.h). */

#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(struct buf *b, size_t more) {
    if (b->failed) return -1;
    if (more >= SIZE_MAX - b->len) { b->failed = 1; return -1; } /* len + more + 1 wraps */
    size_t need = b->len + more + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) { b->failed = 1; return -1; }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (p == NULL) { b->failed = 1; return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

void buf_add(struct buf *b, const void *s, size_t n) {
    if (buf_reserve(b, n) != 0) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void buf_str(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }

void buf_fmt(struct buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) { b->failed = 1; return; }
    if ((size_t)n < sizeof small) { buf_add(b, small, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (big == NULL) { b->failed = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf_add(b, big, (size_t)n);
    free(big);
}

void buf_free(struct buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}

const char *mem_find(const char *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; m <= n && i <= n - m; i++)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}
