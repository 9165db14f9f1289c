/*
 * ignis-mkmodel - write a synthetic model of our family with seeded random
 * weights.
 *
 *   ignis-mkmodel --preset tiny-dense|tiny-moe -o FILE [--seed N] [--dtype bf16|f16|f32]
 *
 * The same preset, seed and dtype give the same bytes. The reference shapes
 * (qwen3.8-27b, qwen3.8-flash-next) are tens of GB and need a streaming
 * writer: they are refused by name until it lands.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mfile.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: ignis-mkmodel --preset NAME -o FILE [--seed N] [--dtype bf16|f16|f32]\n"
	           "presets: tiny-dense, tiny-moe\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"preset", required_argument, NULL, 'p'},
	    {"output", required_argument, NULL, 'o'},
	    {"seed", required_argument, NULL, 's'},
	    {"dtype", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	const char *preset = NULL, *out = NULL;
	enum mfile_dtype dtype = MFILE_BF16;
	unsigned long long seed = 1;
	const struct mdesc *m;
	struct ig_errbuf eb;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "p:o:s:d:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			preset = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 's':
			seed = strtoull(optarg, &end, 0);
			if (*end || !*optarg) {
				fprintf(stderr,
				        "ignis-mkmodel: --seed '%s' is not a whole number\n",
				        optarg);
				return 2;
			}
			break;
		case 'd':
			if (!strcmp(optarg, "bf16"))
				dtype = MFILE_BF16;
			else if (!strcmp(optarg, "f16"))
				dtype = MFILE_F16;
			else if (!strcmp(optarg, "f32"))
				dtype = MFILE_F32;
			else {
				fprintf(stderr,
				        "ignis-mkmodel: --dtype '%s'; accepted: bf16, f16, f32\n",
				        optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("ignis-mkmodel %s\n", IGNIS_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!preset || !out || optind < argc) {
		usage(stderr);
		return 2;
	}
	m = mdesc_find(preset);
	if (!m) {
		fprintf(stderr,
		        "ignis-mkmodel: unknown preset '%s'; accepted: tiny-dense, tiny-moe\n",
		        preset);
		return 2;
	}
	if (m->weight_bytes) {
		fprintf(stderr,
		        "ignis-mkmodel: preset '%s' is a reference shape (%llu bytes of weights): "
		        "it needs the streaming writer that comes with the GPU runs; accepted now: "
		        "tiny-dense, tiny-moe\n",
		        preset, (unsigned long long)m->weight_bytes);
		return 2;
	}
	if (mfile_write_synthetic(m, seed, dtype, out, &eb)) {
		fprintf(stderr, "ignis-mkmodel: %s\n", eb.msg);
		return 1;
	}
	fprintf(stderr, "ignis-mkmodel: wrote %s (%s, seed %llu)\n", out, m->name, seed);
	return 0;
}
