/*
 * jlib/json.h: JSON as the guard speaks it with the daemon (see buf.h for jlib).
 *
 * Reading is strict and in place: the text is never copied into a tree; a value is found by
 * walking the text from `p` to `end` (exclusive). json_skip_value validates (a malformed
 * value is NULL, nothing is read past `end`, nesting is bounded at 64); the other readers
 * expect text it has validated, as the guard validates each answer whole before it reads it.
 * Writing appends to a buffer: only strings need escaping; numbers are written with buf_fmt.
 */

#ifndef JLIB_JSON_H
#define JLIB_JSON_H

#include "buf.h"

const char *json_skip_ws(const char *p, const char *end);
/* The end of the JSON value at p (validated), or NULL; `depth` is the nesting so far (0). */
const char *json_skip_value(const char *p, const char *end, int depth);
/* The string at p (a validated value), decoded (malloc'd); NULL if it is not a string (or is
 * null), holds a NUL or a lone surrogate, or memory ran out. */
char *json_string(const char *p, const char *end);
/* The value of `key` in the object at p, or NULL. */
const char *json_get(const char *p, const char *end, const char *key);
char *json_get_string(const char *p, const char *end, const char *key);
/* 1 when `key` is true, else 0 (absent, false, or not a boolean). */
int json_get_bool(const char *p, const char *end, const char *key);
/* A number of `key`; 0 when it is there and a number, else -1. */
int json_get_number(const char *p, const char *end, const char *key, double *out);
/* Strict UTF-8 (what the daemon's JSON reader takes): no overlong forms, no surrogates. */
int json_valid_utf8(const char *s);
/* `s` as a JSON string, quoted and escaped. */
void json_put_string(struct buf *b, const char *s);

#endif
