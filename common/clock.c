/* clock.c - time helpers (see clock.h). */
#include "clock.h"

#include <stdio.h>
#include <time.h>

uint64_t clk_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t clk_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void clk_rfc3339(char *out, size_t cap)
{
	struct timespec ts;
	struct tm tm;
	char base[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, cap, "%s.%03ldZ", base, ts.tv_nsec / 1000000L);
}

void clk_sleep_ms(uint64_t ms)
{
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};

	/* A signal cuts the sleep short on purpose: callers re-check their flags. */
	nanosleep(&ts, NULL);
}

void clk_fmt_duration(char *out, size_t cap, uint64_t ms)
{
	uint64_t s = ms / 1000;

	if (s >= 86400)
		snprintf(out, cap, "%llud%02lluh", (unsigned long long)(s / 86400),
		         (unsigned long long)(s % 86400 / 3600));
	else if (s >= 3600)
		snprintf(out, cap, "%lluh%02llum", (unsigned long long)(s / 3600),
		         (unsigned long long)(s % 3600 / 60));
	else if (s >= 60)
		snprintf(out, cap, "%llum%02llus", (unsigned long long)(s / 60),
		         (unsigned long long)(s % 60));
	else
		snprintf(out, cap, "%llus", (unsigned long long)s);
}
