/*
 * ignis-supervisor - the one program an operator starts.
 *
 *   ignis-supervisor start  [-c FILE] [--bin-dir DIR] [knob flags]
 *   ignis-supervisor plan   [-c FILE] [--json] [knob flags]
 *   ignis-supervisor status [-c FILE] [--runtime-dir DIR] [--json]
 *   ignis-supervisor stop   [-c FILE] [--runtime-dir DIR]
 *   ignis-supervisor restart kvstore|gpu-worker [-c FILE] [--runtime-dir DIR]
 *   ignis-supervisor reference      (docs/reference/knobs.md, from the table)
 *
 * Knob flags, their variables and YAML keys come from common/knobs.h.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/knobs.h"
#include "plan.h"
#include "sup.h"
#include "version.h"

enum { OPT_CONFIG = 'c', OPT_HELP = 'h', OPT_BIN_DIR = 1000, OPT_JSON, OPT_VERSION, OPT_KNOB };

static const char *type_word(enum knob_type t)
{
	switch (t) {
	case KT_BYTES:
		return "<bytes>";
	case KT_POOL:
		return "<bytes|tokens>";
	case KT_COUNT:
		return "<n>";
	case KT_BOOL:
		return "<on|off>";
	case KT_SWITCH:
		return "";
	case KT_ENUM:
	case KT_MODEL:
		return "<name>";
	case KT_PATH:
		return "<dir>";
	case KT_ADDR:
		return "<url>";
	case KT_HOSTPORT:
	case KT_LISTEN:
		return "<host:port>";
	case KT_REMOVED:
		return "";
	case KT_SECRET:
		return "<key>";
	case KT_ORIGINS:
		return "<origins>";
	}
	return "";
}

static const char *default_text(const struct knob_def *d)
{
	if (!strcmp(d->def, "@model"))
		return "per model";
	return d->def[0] ? d->def : "-";
}

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: ignis-supervisor <command> [options]\n"
	       "\n"
	       "commands:\n"
	       "  start      plan, then start the gpu-worker and the kvstore daemon and watch\n"
	       "             them; events go to stdout as JSON lines\n"
	       "  plan       print the VRAM plan (a table, then its event); --json: events only.\n"
	       "             Exit 0 a plan that starts, 2 a configuration error, 3 a refusal\n"
	       "  status     print each process's role, pid, state, uptime and restarts\n"
	       "  stop       stop a running supervisor and its daemons\n"
	       "  restart    restart one daemon in order (kvstore or gpu-worker); the other\n"
	       "             keeps running\n"
	       "  reference  print the knob reference (docs/reference/knobs.md)\n"
	       "\n"
	       "options:\n"
	       "  -c, --config FILE   YAML configuration (default: the embedded one)\n"
	       "  --bin-dir DIR       where the daemons are (start; default: beside this program)\n"
	       "  --json              status or plan as JSON\n"
	       "  -h, --help, --version\n"
	       "\n"
	       "knobs (flag > IGNIS_* variable > YAML key > profile > default):\n");
	for (int i = 0; i < KNOB__COUNT; i++) {
		const struct knob_def *d = &knob_defs[i];
		char flag[96], env[96], head[160];

		knob_flag(d->id, flag, sizeof(flag));
		knob_env(d->id, env, sizeof(env));
		snprintf(head, sizeof(head), "%s %s", flag, type_word(d->type));
		fprintf(f, "  %-44s %s [%s; default %s%s%s]\n", head, d->doc, env, default_text(d),
		        d->accepted ? "; accepted " : "", d->accepted ? d->accepted : "");
	}
}

/* docs/reference/knobs.md, generated: a test fails when the page is stale. */
static void reference(FILE *f)
{
	fprintf(f,
	        "# Knob reference\n\n"
	        "Generated from the knob table (`common/knobs.h`) by `ignis-supervisor "
	        "reference`; do not edit by hand.\n\n"
	        "Precedence: flag > `IGNIS_*` variable > YAML key (`-c FILE`) > profile "
	        "(`--profile`) > the model's default > the built-in default. Sizes take K, M, G, "
	        "T (binary); pool sizes also take tokens (`512Ktok`).\n\n"
	        "| flag | variable | YAML key | default | accepted | meaning |\n"
	        "|---|---|---|---|---|---|\n");
	for (int i = 0; i < KNOB__COUNT; i++) {
		const struct knob_def *d = &knob_defs[i];
		char flag[96], env[96], key[96], acc[256];

		knob_flag(d->id, flag, sizeof(flag));
		knob_env(d->id, env, sizeof(env));
		knob_yaml_key(d->id, key, sizeof(key));
		fprintf(f, "| `%s` | `%s` | `%s` | %s | %s | %s%s |\n", flag, env, key,
		        default_text(d), knob_accepted_text(d->id, acc, sizeof(acc)), d->doc,
		        d->refused_by == KNOB_REFUSE_DENSE ? " Refused by the 27B's family."
		        : d->refused_by == KNOB_REFUSE_MOE ? " Refused by Flash-Next's family."
		                                           : "");
	}
	fprintf(f, "\n## Profiles\n\n"
	           "A profile's value yields to a flag, a variable or the file; one the model "
	           "refuses is passed over.\n\n"
	           "| profile | knob | models | value |\n|---|---|---|---|\n");
	for (size_t i = 0; i < knob_nprofile_rows; i++) {
		const struct knob_profile_row *r = &knob_profile_rows[i];
		char flag[96];

		knob_flag(r->id, flag, sizeof(flag));
		fprintf(f, "| `%s` | `%s` | %s | %s |\n", r->profile, flag,
		        r->family == MDESC_DENSE ? "the 27B's family"
		        : r->family == MDESC_MOE ? "Flash-Next's family"
		                                 : "all",
		        r->value);
	}
	fprintf(f, "| `none` | | | nothing: the built-in and per-model defaults |\n");
	fprintf(f, "\n## Per-model defaults\n\n"
	           "| model | context | prefill chunk | default max tokens | lanes | retained host "
	           "slots | KV-disk |\n|---|---|---|---|---|---|---|\n");
	for (unsigned i = 0; i < mdesc_nbuiltin; i++) {
		const struct mdesc *m = &mdesc_builtin[i];

		fprintf(f, "| `%s` | %u | %u | %u | %u%s | %u | %llu |\n", m->name,
		        m->default_context, m->default_chunk, m->default_max_tokens,
		        m->family == MDESC_DENSE ? m->fixed_lanes : m->default_lanes,
		        m->family == MDESC_DENSE ? " (fixed)" : "",
		        m->family == MDESC_DENSE ? 2 * m->fixed_lanes : m->default_retained_host,
		        (unsigned long long)m->default_kv_disk_bytes);
	}
}

int main(int argc, char **argv)
{
	static struct option opts[KNOB__COUNT + 8];
	static struct cfg cfg;
	struct sup_opts o = {.cfg = &cfg, .argv0 = argv[0]};
	const char *cmd, *config_path = NULL, *restart_role = NULL;
	struct ig_errbuf eb;
	int n = 0, c, rc;

	opts[n++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
	opts[n++] = (struct option){"bin-dir", required_argument, NULL, OPT_BIN_DIR};
	opts[n++] = (struct option){"json", no_argument, NULL, OPT_JSON};
	opts[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
	opts[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
	for (int i = 0; i < KNOB__COUNT; i++)
		opts[n++] = (struct option){knob_defs[i].name,
		                            knob_defs[i].type == KT_SWITCH ? optional_argument
		                                                           : required_argument,
		                            NULL, OPT_KNOB + i};
	opts[n] = (struct option){NULL, 0, NULL, 0};
	cfg_init(&cfg);

	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "--version")) {
		printf("ignis-supervisor %s\n", IGNIS_VERSION);
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-') {
		fprintf(stderr,
		        "ignis-supervisor: expected a command: start, plan, status, stop or "
		        "reference\n");
		return 2;
	}
	cmd = argv[1];
	opterr = 0;
	optind = 2;
	while ((c = getopt_long(argc, argv, ":c:h", opts, NULL)) != -1) {
		if (c >= OPT_KNOB && c < OPT_KNOB + KNOB__COUNT) {
			cfg_set_flag(&cfg, (enum knob_id)(c - OPT_KNOB), optarg ? optarg : "on");
			continue;
		}
		switch (c) {
		case OPT_CONFIG:
			config_path = optarg;
			break;
		case OPT_BIN_DIR:
			o.bin_dir = optarg;
			break;
		case OPT_JSON:
			o.json = true;
			break;
		case OPT_HELP:
			usage(stdout);
			return 0;
		case OPT_VERSION:
			printf("ignis-supervisor %s\n", IGNIS_VERSION);
			return 0;
		case ':':
			fprintf(stderr, "ignis-supervisor: option '%s' needs a value\n",
			        argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr,
			        "ignis-supervisor: unknown option '%s' (ignis-supervisor --help "
			        "lists them)\n",
			        argv[optind - 1]);
			return 2;
		}
	}
	if (!strcmp(cmd, "restart")) {
		if (optind + 1 != argc) {
			fprintf(stderr, "ignis-supervisor: restart takes one role: kvstore or "
			                "gpu-worker\n");
			return 2;
		}
		restart_role = argv[optind++];
	}
	if (optind < argc) {
		fprintf(stderr, "ignis-supervisor: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!strcmp(cmd, "reference")) {
		reference(stdout);
		return 0;
	}
	rc = cfg_load_file(&cfg, config_path, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	if (!strcmp(cmd, "start"))
		rc = sup_start(&o);
	else if (!strcmp(cmd, "plan"))
		rc = sup_plan(&o);
	else if (!strcmp(cmd, "status"))
		rc = sup_status(&o);
	else if (!strcmp(cmd, "stop"))
		rc = sup_stop(&o);
	else if (!strcmp(cmd, "restart"))
		rc = sup_restart(&o, restart_role);
	else {
		fprintf(
		    stderr,
		    "ignis-supervisor: unknown command '%s'; expected start, plan, status, stop, "
		    "restart or reference\n",
		    cmd);
		rc = 2;
	}
	cfg_release(&cfg);
	return rc;
}
