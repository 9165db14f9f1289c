/* clock.h - monotonic milliseconds and RFC 3339 wall-clock stamps. */
#ifndef IGNIS_COMMON_CLOCK_H
#define IGNIS_COMMON_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC: for intervals, deadlines and uptimes. */
uint64_t clk_mono_ms(void);
/* Microseconds on CLOCK_MONOTONIC: for latencies (time to first token). */
uint64_t clk_mono_us(void);
/* "2026-11-29T11:13:25.123Z" (UTC, milliseconds) into `out`. */
void clk_rfc3339(char *out, size_t cap);
/* Sleep up to `ms` milliseconds; a signal cuts it short so callers re-check flags. */
void clk_sleep_ms(uint64_t ms);
/* "3d04h", "1h02m", "4m05s", "12s" style duration into `out`. */
void clk_fmt_duration(char *out, size_t cap, uint64_t ms);

#endif
