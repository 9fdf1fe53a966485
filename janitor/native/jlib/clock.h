/* jlib/clock.h: the monotonic clock in milliseconds, for deadlines (see buf.h for jlib). */

#ifndef JLIB_CLOCK_H
#define JLIB_CLOCK_H

#include <stdint.h>

/* Milliseconds on the monotonic clock (0 if the system will not say). */
int64_t now_ms(void);
/* Sleep `ms` milliseconds in all: a signal does not cut it short. */
void sleep_ms(int ms);

#endif
