/*
 * replay.c - runs the fuzz target over files without libFuzzer: each
 * argument is a file of hex (a golden message) or a directory of them. Each
 * input is also fed with one-bit flips, so this replay exercises the refusal
 * paths too. Exit 0 when every input passed the target's checks.
 *
 * An input of up to REPLAY_ALL_BYTES gets every bit of every byte flipped.
 * A larger one (the max goldens of submit and tokens, 20 to 37 KB) would take
 * minutes that way, nearly all of it flipping one id of thousands or one byte
 * of a long string; it gets every bit flipped in the header and value bytes
 * of each item, except the middle elements of long arrays (every map entry
 * keeps its flips), and in one byte in REPLAY_BODY_STRIDE of string, binary
 * and extension bodies.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPLAY_ALL_BYTES   4096
#define REPLAY_ENDS        4 /* elements flipped at each end of an array */
#define REPLAY_BODY_STRIDE 97
#define REPLAY_MAX_DEPTH   8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t be(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Walk the item at *pos, marking the bytes to flip when `sel`. False when the
 * bytes are not one well-formed msgpack item. */
static bool mark_item(const uint8_t *b, size_t n, size_t *pos, bool sel, uint8_t *mark, int depth)
{
	/* 0xc4..0xdf: width of the length field, bytes of a fixed-size value. */
	static const uint8_t lenw[] = {1, 2, 4, 1, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0,
	                               0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 2, 4, 2, 4};
	static const uint8_t fixed[] = {0, 0, 0, 1, 1, 1, 4,  8, 1, 2, 4, 8, 1, 2,
	                                4, 8, 2, 3, 5, 9, 17, 0, 0, 0, 0, 0, 0, 0};
	size_t p = *pos, hdr = 1;
	uint64_t body = 0, count = 0;
	bool map = false, opaque = false; /* body is string, binary or extension bytes */
	uint8_t c;

	if (p >= n || depth > REPLAY_MAX_DEPTH)
		return false;
	c = b[p];
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
		/* a value in the type byte */
	} else if (c <= 0x8f) {
		count = 2u * (c & 0x0f);
		map = true;
	} else if (c <= 0x9f) {
		count = c & 0x0f;
	} else if (c <= 0xbf) {
		body = c & 0x1f;
		opaque = true;
	} else if (c == 0xc1) {
		return false;
	} else {
		unsigned k = c - 0xc4;

		hdr = 1 + lenw[k];
		if (n - p < hdr)
			return false;
		if (c == 0xdc || c == 0xdd)
			count = be(b + p + 1, lenw[k]);
		else if (c == 0xde || c == 0xdf)
			count = 2 * be(b + p + 1, lenw[k]), map = true;
		else if (lenw[k])
			body = fixed[k] + be(b + p + 1, lenw[k]), opaque = true;
		else
			hdr += fixed[k]; /* an integer or float: its value bytes too */
	}
	if (hdr > n - p || body > n - p - hdr)
		return false;
	if (sel) {
		memset(mark + p, 1, hdr);
		for (uint64_t i = 0; opaque && i < body; i += REPLAY_BODY_STRIDE)
			mark[p + hdr + i] = 1;
	}
	*pos = p + hdr + (size_t)body;
	for (uint64_t i = 0; i < count; i++) {
		bool keep = map || i < REPLAY_ENDS || count - i <= REPLAY_ENDS;

		if (!mark_item(b, n, pos, sel && keep, mark, depth + 1))
			return false;
	}
	return true;
}

/* Which bytes of the input get their bits flipped. */
static void choose_bytes(const uint8_t *b, size_t n, uint8_t *mark)
{
	size_t pos = 0;

	if (n <= REPLAY_ALL_BYTES) {
		memset(mark, 1, n);
		return;
	}
	memset(mark, 0, n);
	if (mark_item(b, n, &pos, true, mark, 0) && pos == n)
		return;
	/* Not one msgpack item: the first and last bytes and a stride between. */
	for (size_t i = 0; i < n; i++)
		mark[i] = i < REPLAY_ALL_BYTES / 2 || n - i <= REPLAY_ALL_BYTES / 2 ||
		          i % REPLAY_BODY_STRIDE == 0;
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "r");
	static uint8_t buf[1 << 16], mark[1 << 16];
	size_t n = 0, flipped = 0;
	unsigned v;

	if (!f) {
		perror(path);
		return 1;
	}
	while (n < sizeof(buf) && fscanf(f, "%2x", &v) == 1)
		buf[n++] = (uint8_t)v;
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	choose_bytes(buf, n, mark);
	for (size_t i = 0; i < n; i++) {
		if (!mark[i])
			continue;
		flipped++;
		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1u << bit);
			LLVMFuzzerTestOneInput(buf, n);
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
	if (flipped < n)
		printf("%s: flipped the bits of %zu of %zu bytes\n", path, flipped, n);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0, bad = 0;

	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		struct dirent *e;

		if (!d) {
			bad += run_file(argv[i]);
			files++;
			continue;
		}
		while ((e = readdir(d))) {
			char path[4096];

			if (!strstr(e->d_name, ".hex"))
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			bad += run_file(path);
			files++;
		}
		closedir(d);
	}
	printf("replayed %d inputs (and one-bit flips of each)\n", files);
	return bad || files == 0 ? 1 : 0;
}
