/*
 * replay.c - runs the fuzz target over files without libFuzzer: each
 * argument is a file of hex (a golden message) or a directory of them. Each
 * input is also fed with every byte flipped once, so this replay exercises
 * the refusal paths too. Exit 0 when every input passed the target's checks.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "r");
	uint8_t buf[1 << 16];
	size_t n = 0;
	unsigned v;

	if (!f) {
		perror(path);
		return 1;
	}
	while (n < sizeof(buf) && fscanf(f, "%2x", &v) == 1)
		buf[n++] = (uint8_t)v;
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	for (size_t i = 0; i < n; i++) {
		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (uint8_t)(1u << bit);
			LLVMFuzzerTestOneInput(buf, n);
			buf[i] ^= (uint8_t)(1u << bit);
		}
	}
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
	printf("replayed %d inputs (and every one-bit flip of each)\n", files);
	return bad || files == 0 ? 1 : 0;
}
