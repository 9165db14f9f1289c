/*
 * ignis-supervisor - the one program an operator starts.
 *
 *   ignis-supervisor start [-c FILE] [--runtime-dir DIR] [--bin-dir DIR]
 *   ignis-supervisor status [-c FILE] [--runtime-dir DIR] [--json]
 *   ignis-supervisor stop [-c FILE] [--runtime-dir DIR]
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "sup.h"
#include "version.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: ignis-supervisor <command> [options]\n"
	        "\n"
	        "commands:\n"
	        "  start    start the gpu-worker and the kvstore daemon and watch them;\n"
	        "           events go to stdout as JSON lines\n"
	        "  status   print each process's role, pid, state, uptime and restarts\n"
	        "  stop     stop a running supervisor and its daemons\n"
	        "\n"
	        "options:\n"
	        "  -c, --config FILE     YAML configuration (default: the embedded one); status\n"
	        "                        and stop read its runtime_dir too\n"
	        "  --runtime-dir DIR     directory of the control sockets (IGNIS_RUNTIME_DIR;\n"
	        "                        default $XDG_RUNTIME_DIR/ignis, else /tmp/ignis-$UID)\n"
	        "  --bin-dir DIR         where ignis-gpu-worker and ignis-kvstored are (start;\n"
	        "                        default: beside this program, or the build tree)\n"
	        "  --json                status as one JSON object\n"
	        "  -h, --help            this text\n"
	        "  --version             print the version\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"runtime-dir", required_argument, NULL, 'r'},
	    {"bin-dir", required_argument, NULL, 'b'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	struct sup_opts o = {.argv0 = argv[0]};
	const char *cmd;
	int c;

	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "--version")) {
		printf("ignis-supervisor %s\n", IGNIS_VERSION);
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr, "ignis-supervisor: expected a command: start, status or stop\n");
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	opterr = 0;
	optind = 2;
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o.config_path = optarg;
			break;
		case 'r':
			o.runtime_dir = optarg;
			break;
		case 'b':
			o.bin_dir = optarg;
			break;
		case 'j':
			o.json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("ignis-supervisor %s\n", IGNIS_VERSION);
			return 0;
		default:
			fprintf(stderr, "ignis-supervisor: unknown or incomplete option '%s'\n",
			        argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ignis-supervisor: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!strcmp(cmd, "start"))
		return sup_start(&o);
	if (o.bin_dir) {
		fprintf(stderr, "ignis-supervisor: --bin-dir is an option of 'start'\n");
		return 2;
	}
	if (!strcmp(cmd, "status"))
		return sup_status(&o);
	if (o.json) {
		fprintf(stderr, "ignis-supervisor: --json is an option of 'status'\n");
		return 2;
	}
	if (!strcmp(cmd, "stop"))
		return sup_stop(&o);
	fprintf(stderr, "ignis-supervisor: unknown command '%s'; expected start, status or stop\n",
	        cmd);
	return 2;
}
