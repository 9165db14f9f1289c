/* daemon.c - the supervised-process skeleton of the two daemons (see daemon.h). */
#include "daemon.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/event.h"
#include "common/rtdir.h"
#include "version.h"

/* Signal flag: the one kind of mutable global the style allows (rule 13). */
static volatile sig_atomic_t dmn__signal;

static void dmn__on_signal(int sig)
{
	dmn__signal = sig;
}

static void dmn__usage(const struct dmn_spec *spec, FILE *f)
{
	fprintf(f,
	        "usage: %s [--runtime-dir DIR] [--supervisor-pid PID]\n"
	        "%s\n\n"
	        "  --runtime-dir DIR     directory of the control sockets (IGNIS_RUNTIME_DIR;\n"
	        "                        default $XDG_RUNTIME_DIR/ignis, else /tmp/ignis-$UID)\n"
	        "  --supervisor-pid PID  exit when process PID is gone (set by ignis-supervisor)\n"
	        "  --help, --version\n\n"
	        "Normally started by 'ignis-supervisor start', not by hand.\n",
	        spec->program, spec->summary);
}

int dmn_parse_args(const struct dmn_spec *spec, int argc, char **argv, struct dmn_args *out)
{
	static const struct option opts[] = {
	    {"runtime-dir", required_argument, NULL, 'r'},
	    {"supervisor-pid", required_argument, NULL, 'p'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	memset(out, 0, sizeof(*out));
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			out->runtime_dir = optarg;
			break;
		case 'p': {
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || v <= 0 || v > INT32_MAX) {
				fprintf(stderr,
				        "%s: --supervisor-pid '%s' is not a process id; expected a "
				        "positive integer\n",
				        spec->program, optarg);
				return -1;
			}
			out->supervisor_pid = (pid_t)v;
			break;
		}
		case 'h':
			dmn__usage(spec, stdout);
			return 1;
		case 'V':
			printf("%s %s\n", spec->program, IGNIS_VERSION);
			return 1;
		default:
			fprintf(stderr, "%s: unknown or incomplete option '%s'\n", spec->program,
			        argv[optind - 1]);
			dmn__usage(spec, stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", spec->program, argv[optind]);
		return -1;
	}
	return 0;
}

int dmn_run(const struct dmn_spec *spec, const struct dmn_args *args)
{
	char rtdir[RTDIR_PATH_MAX + 1];
	struct sigaction sa;
	struct ig_errbuf eb;
	struct svc svc;
	const char *why;
	struct ev e;
	int rc;

	ev_setup(spec->role, STDOUT_FILENO);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = dmn__on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	rc = rtdir_resolve(args->runtime_dir, NULL, NULL, rtdir, sizeof(rtdir), &eb);
	if (!rc)
		rc = rtdir_prepare(rtdir, &eb);
	if (!rc)
		rc = svc_open(&svc, spec->role, rtdir, spec->sockname, 0, &eb);
	if (rc) {
		ev_msg(EV_ERROR, "ignis.daemon.start_failed", "%s", eb.msg);
		fprintf(stderr, "%s: %s\n", spec->program, eb.msg);
		return 1;
	}
	if (spec->svc_at)
		*spec->svc_at = &svc;
	ev_begin(&e, EV_INFO, "ignis.daemon.ready");
	ev_str(&e, "socket", svc.lis.path);
	ev_u64(&e, "protocol", MSG_PROTO_VERSION);
	ev_str(&e, "build", IGNIS_VERSION);
	if (spec->ready_fields)
		spec->ready_fields(&e);
	ev_end(&e);

	while (!dmn__signal && !svc_stop_requested(&svc)) {
		bool busy = false;
		int fatal = 0;

		if (args->supervisor_pid && getppid() != args->supervisor_pid)
			break; /* the supervisor is gone (PR_SET_PDEATHSIG is the first line) */
		if (spec->work) {
			busy = spec->work(spec->ctx, &fatal);
			if (fatal) {
				rc = fatal;
				break;
			}
		}
		/* between two steps of work the socket is only looked at */
		rc = svc_poll(&svc, busy ? 0 : 200, spec->handle, spec->ctx);
		if (rc) {
			ev_msg(EV_ERROR, "ignis.daemon.socket_failed", "control socket failed: %s",
			       ig_err_str(rc));
			break;
		}
	}
	why = dmn__signal == SIGTERM     ? "SIGTERM"
	      : dmn__signal == SIGINT    ? "SIGINT"
	      : svc_stop_requested(&svc) ? "shutdown request"
	      : rc                       ? "failure"
	                                 : "supervisor gone";
	ev_begin(&e, EV_INFO, "ignis.daemon.stopping");
	ev_str(&e, "reason", why);
	if (svc.stop_reason[0])
		ev_str(&e, "detail", svc.stop_reason);
	ev_u64(&e, "uptime_ms", svc_uptime_ms(&svc));
	ev_end(&e);
	if (spec->svc_at)
		*spec->svc_at = NULL;
	svc_close(&svc);
	return rc ? 1 : 0;
}
