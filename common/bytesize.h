/*
 * bytesize.h - byte sizes as operators write them.
 *
 * Accepted: a decimal integer with an optional binary suffix K, M, G or T
 * (also KiB/MiB/GiB/TiB; case-insensitive): "1536M" = 1,610,612,736 bytes.
 * With tokens allowed, the same with "tok" appended counts tokens instead:
 * "512Ktok" = 524,288 tokens (the caller turns tokens into pages).
 * Overflow past 2^64 - 1, signs, fractions, spaces inside and trailing junk
 * are refused.
 */
#ifndef IGNIS_COMMON_BYTESIZE_H
#define IGNIS_COMMON_BYTESIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct bsize {
	uint64_t n;  /* bytes, or tokens when `tokens` */
	bool tokens; /* the value was written with a "tok" suffix */
};

/* Parse `s`. `allow_tokens` admits the "tok" suffix. On error `eb` says what
 * was wrong and what is accepted. */
int bsize_parse(const char *s, bool allow_tokens, struct bsize *out, struct ig_errbuf *eb);

/* "1.50 GiB" / "512 B" style, for messages. */
void bsize_format(char *out, size_t cap, uint64_t bytes);

#endif
