/* jlib/json.c: JSON read strictly, and written (see json.h). */

#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *json_skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* The end of the JSON value at p (validated), or NULL. */
const char *json_skip_value(const char *p, const char *end, int depth) {
    if (depth > 64) return NULL;
    p = json_skip_ws(p, end);
    if (p >= end) return NULL;
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = json_skip_ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (object) {
                p = json_skip_ws(p, end);
                if (p >= end || *p != '"') return NULL;
                p = json_skip_value(p, end, depth + 1);
                if (p == NULL) return NULL;
                p = json_skip_ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p++;
            }
            p = json_skip_value(p, end, depth + 1);
            if (p == NULL) return NULL;
            p = json_skip_ws(p, end);
            if (p >= end) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p++;
        }
    }
    if (*p == '"') {
        for (p++; p < end; p++) {
            unsigned char c = (unsigned char)*p;
            if (c == '"') return p + 1;
            if (c < 0x20) return NULL;
            if (c == '\\') {
                if (++p >= end) return NULL;
                if (*p == 'u') {
                    for (int i = 1; i <= 4; i++)
                        if (p + i >= end || !strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                            return NULL;
                    p += 4;
                } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                    return NULL;
                }
            }
        }
        return NULL;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0) return p + n;
    }
    const char *start = p;
    if (p < end && *p == '-') p++;
    while (p < end && strchr("0123456789.eE+-", *p) && *p) p++;
    return p > start ? p : NULL;
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                                          : c - 'A' + 10);
    }
    return v;
}

static void put_utf8(struct buf *b, unsigned cp) {
    char o[4];
    size_t n;
    if (cp < 0x80) { o[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    buf_add(b, o, n);
}

/* The string at p (a validated value), decoded; NULL if it is not a string (or is null). */
char *json_string(const char *p, const char *end) {
    p = json_skip_ws(p, end);
    if (p >= end || *p != '"') return NULL;
    struct buf b = {0};
    buf_add(&b, "", 0);
    for (p++; p < end && *p != '"'; p++) {
        if (*p != '\\') { buf_add(&b, p, 1); continue; }
        p++;
        switch (*p) {
        case 'b': buf_add(&b, "\b", 1); break;
        case 'f': buf_add(&b, "\f", 1); break;
        case 'n': buf_add(&b, "\n", 1); break;
        case 'r': buf_add(&b, "\r", 1); break;
        case 't': buf_add(&b, "\t", 1); break;
        case 'u': {
            unsigned cp = (unsigned)hex4(p + 1);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && end - p > 6 && p[1] == '\\' && p[2] == 'u') {
                unsigned low = (unsigned)hex4(p + 3);
                if (low >= 0xDC00 && low < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                }
            }
            if (cp == 0 || (cp >= 0xD800 && cp < 0xE000)) { buf_free(&b); return NULL; }
            put_utf8(&b, cp);
            break;
        }
        default: buf_add(&b, p, 1); break; /* " \ / */
        }
    }
    if (b.failed) { buf_free(&b); return NULL; }
    return b.p;
}

/* The value of `key` in the object at p, or NULL. */
const char *json_get(const char *p, const char *end, const char *key) {
    p = json_skip_ws(p, end);
    if (p >= end || *p != '{') return NULL;
    p = json_skip_ws(p + 1, end);
    if (p < end && *p == '}') return NULL;
    for (;;) {
        const char *kend = json_skip_value(p, end, 1);
        if (kend == NULL) return NULL;
        char *name = json_string(p, kend);
        p = json_skip_ws(kend, end);
        if (p >= end || *p != ':') { free(name); return NULL; }
        const char *value = json_skip_ws(p + 1, end);
        int hit = name != NULL && strcmp(name, key) == 0;
        free(name);
        if (hit) return value;
        p = json_skip_value(value, end, 1);
        if (p == NULL) return NULL;
        p = json_skip_ws(p, end);
        if (p >= end || *p != ',') return NULL;
        p = json_skip_ws(p + 1, end);
    }
}

char *json_get_string(const char *p, const char *end, const char *key) {
    const char *v = json_get(p, end, key);
    return v ? json_string(v, end) : NULL;
}

int json_get_bool(const char *p, const char *end, const char *key) {
    const char *v = json_get(p, end, key);
    return v != NULL && (size_t)(end - v) >= 4 && memcmp(v, "true", 4) == 0;
}

/* A number of `key`; 0 when it is there and a number, else -1. */
int json_get_number(const char *p, const char *end, const char *key, double *out) {
    const char *v = json_get(p, end, key);
    if (v == NULL) return -1;
    const char *e = json_skip_value(v, end, 1);
    if (e == NULL || e - v >= 40 || !(*v == '-' || (*v >= '0' && *v <= '9'))) return -1;
    char tmp[48];
    memcpy(tmp, v, (size_t)(e - v));
    tmp[e - v] = '\0';
    char *stop;
    errno = 0;
    *out = strtod(tmp, &stop);
    return *stop == '\0' && errno == 0 ? 0 : -1;
}

/* Strict UTF-8 (what the daemon's JSON reader takes): no overlong forms, no surrogates. */
int json_valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, need, cp;
        if (c < 0x80) { p++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; }
        else return 0;
        for (unsigned i = 1; i <= need; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp < 0xE000))
            return 0;
        p += need + 1;
    }
    return 1;
}

void json_put_string(struct buf *b, const char *s) {
    buf_add(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') { buf_add(b, "\\", 1); buf_add(b, p, 1); }
        else if (c < 0x20) buf_fmt(b, "\\u%04x", c);
        else buf_add(b, p, 1);
    }
    buf_add(b, "\"", 1);
}
