/*
 * ignis-client - talk to a running Ignis server's front door, through
 * libignis-client (ignis_client.h) alone.
 *
 *   ignis-client generate --prompt TEXT | --ids 1,2,3 [--class interactive|agent]
 *                [--max-tokens N] [--seed S] [--temperature T] [--top-p P]
 *                [--top-k K] [--stop S]... [--grammar FILE | --json-schema FILE]
 *                [--grammar-trigger TEXT] [--json]
 *   ignis-client status [--json]
 *   ignis-client cancel ID
 *   common: [--server URL] [--runtime-dir DIR]
 *
 * generate prints the text as it comes (on a terminal, a status line with
 * tokens per second on stderr); with --json, one JSON object a line on
 * stdout for each event: submitted, tokens (ids and text), then done (with
 * the prompt tokens taken from a retained checkpoint, `cached`) or error. Ctrl-C cancels the
 * request. Exit codes: 0 done, 1 refused or failed, 2 bad usage, 130 interrupted.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/event.h" /* ev_json_escape */
#include "ignis_client.h"

#define CLI_IDS_MAX  4096
#define CLI_STOP_MAX 8

static volatile sig_atomic_t cli__interrupted; /* a signal flag */

static void cli__on_signal(int sig)
{
	(void)sig;
	cli__interrupted = 1;
}

struct cli {
	const char *server, *rtdir;
	bool json;
	struct igc_params p;
	const char *stops[CLI_STOP_MAX];
	uint32_t ids[CLI_IDS_MAX];
	bool have_prompt;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ignis-client generate --prompt TEXT | --ids 1,2,3 [--class "
	           "interactive|agent]\n"
	           "                [--max-tokens N] [--seed S] [--temperature T] [--top-p P] "
	           "[--top-k K]\n"
	           "                [--stop S]... [--grammar FILE | --json-schema FILE] "
	           "[--grammar-trigger TEXT]\n"
	           "                [--json]\n"
	           "       ignis-client status [--json]\n"
	           "       ignis-client cancel ID\n"
	           "common options: --server URL (ipc:///path or tcp://HOST:PORT; default\n"
	           "  $IGNIS_SERVER_BIND, else ipc://<runtime dir>/client.sock), --runtime-dir "
	           "DIR; -h, --help\n");
}

/* A bad option value: exit code 2, naming it and what is accepted. */
static int bad(const char *opt, const char *arg, const char *accepted)
{
	fprintf(stderr, "ignis-client: %s '%s'; accepted: %s\n", opt, arg, accepted);
	return 2;
}

static int cli__uint(const char *opt, const char *arg, uint64_t hi, uint64_t *out)
{
	char *end, acc[64];
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 10);
	snprintf(acc, sizeof(acc), "a whole number 0..%" PRIu64, hi);
	if (errno || end == arg || *end || arg[0] == '-' || v > hi)
		return bad(opt, arg, acc);
	*out = v;
	return 0;
}

static int cli__real(const char *opt, const char *arg, double lo, double hi, double *out)
{
	char *end, acc[64];
	double v;

	errno = 0;
	v = strtod(arg, &end);
	snprintf(acc, sizeof(acc), "a number %g..%g", lo, hi);
	if (errno || end == arg || *end || !(v >= lo && v <= hi))
		return bad(opt, arg, acc);
	*out = v;
	return 0;
}

static int cli__ids(struct cli *c, const char *arg)
{
	const char *p = arg;

	c->p.n_ids = 0;
	while (*p) {
		char *end;
		unsigned long long v;

		errno = 0;
		v = strtoull(p, &end, 10);
		if (errno || end == p || *p == '-' || v > UINT32_MAX || (*end && *end != ',') ||
		    c->p.n_ids == CLI_IDS_MAX)
			return bad("--ids", arg,
			           "up to 4096 token ids 0..4294967295, separated by commas");
		c->ids[c->p.n_ids++] = (uint32_t)v;
		p = *end ? end + 1 : end;
	}
	if (!c->p.n_ids)
		return bad("--ids", arg, "at least one token id");
	c->p.ids = c->ids;
	return 0;
}

static double cli__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A JSON string (quoted) on stdout. */
static void cli__jstr(const char *s, size_t n)
{
	char buf[1024];

	putchar('"');
	while (n) {
		size_t take = n > 128 ? 128 : n, w;

		/* never split a UTF-8 character between two escapes */
		while (take < n && take > 0 && ((unsigned char)s[take] & 0xc0) == 0x80)
			take--;
		w = ev_json_escape(buf, sizeof(buf), s, take);
		if (w != (size_t)-1)
			fwrite(buf, 1, w, stdout);
		s += take;
		n -= take;
	}
	putchar('"');
}

static int cli__fail(const struct cli *c, uint64_t id, const struct igc_error *err)
{
	if (c->json) {
		printf("{\"event\":\"error\",\"id\":%" PRIu64 ",\"code\":%d,\"name\":", id,
		       err->code);
		cli__jstr(igc_code_name(err->code), strlen(igc_code_name(err->code)));
		printf(",\"message\":");
		cli__jstr(err->message, strlen(err->message));
		printf("}\n");
		fflush(stdout);
	}
	fprintf(stderr, "ignis-client: %s\n", err->message);
	return 1;
}

static void cli__status_line(uint64_t id, uint32_t n, double t0, const char *state, bool end)
{
	double dt = cli__now() - t0;

	fprintf(stderr, "\r\033[K[request %" PRIu64 "] %u tokens, %.1f tok/s, %s%s", id, n,
	        dt > 0 ? n / dt : 0.0, state, end ? "\n" : "");
	fflush(stderr);
}

static int cli_generate(struct cli *c)
{
	bool live = isatty(STDERR_FILENO) && !isatty(STDOUT_FILENO) && !c->json;
	bool summary = isatty(STDERR_FILENO) && !c->json;
	struct igc_client *cl;
	struct igc_submitted sub;
	struct igc_stream *s = NULL;
	struct igc_error err;
	struct sigaction sa;
	double t0;
	int rc;

	if (!c->have_prompt) {
		fprintf(stderr, "ignis-client: generate needs --prompt TEXT or --ids 1,2,3\n");
		return 2;
	}
	/* Until the request has an id, a signal ends the program as signals do
	 * (the front door drops a submit whose client left); from then on it
	 * cancels the request first. */
	if (igc_connect(&cl, c->server, c->rtdir, &err))
		return cli__fail(c, 0, &err);
	t0 = cli__now();
	rc = igc_submit(cl, &c->p, &sub, &err);
	if (rc) {
		igc_close(cl);
		return cli__fail(c, 0, &err);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = cli__on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (c->json) {
		printf("{\"event\":\"submitted\",\"id\":%" PRIu64
		       ",\"prompt_tokens\":%u,\"max_tokens\":%u,\"reserved_pages\":%u,"
		       "\"queued_ms\":%" PRIu64 "}\n",
		       sub.id, sub.prompt_tokens, sub.max_tokens, sub.reserved_pages,
		       sub.queued_ms);
		fflush(stdout);
	}
	rc = igc_stream_open(cl, sub.id, &s, &err);
	char last_state[17] = "";

	while (!rc) {
		struct igc_chunk ch;

		if (cli__interrupted) {
			igc_cancel(cl, sub.id, NULL);
			if (live || summary)
				fprintf(stderr,
				        "\nignis-client: interrupted; request %" PRIu64
				        " cancelled\n",
				        sub.id);
			igc_stream_close(s);
			igc_close(cl);
			return 130;
		}
		rc = igc_stream_next(s, 250, &ch, &err);
		/* a change of state (a move out and back shows here) */
		if (c->json && !rc && ch.state && strcmp(ch.state, last_state) != 0) {
			printf("{\"event\":\"state\",\"id\":%" PRIu64 ",\"state\":", sub.id);
			cli__jstr(ch.state, strlen(ch.state));
			printf("}\n");
			snprintf(last_state, sizeof(last_state), "%s", ch.state);
		}
		if (ch.n || (ch.done && ch.text_len)) {
			if (c->json) {
				printf("{\"event\":\"tokens\",\"id\":%" PRIu64
				       ",\"from\":%u,\"ids\":[",
				       sub.id, ch.from);
				for (size_t i = 0; i < ch.n; i++)
					printf(i ? ",%u" : "%u", ch.ids[i]);
				printf("],\"text\":");
				cli__jstr(ch.text, ch.text_len);
				printf("}\n");
			} else {
				fwrite(ch.text, 1, ch.text_len, stdout);
			}
			fflush(stdout);
		}
		if (live)
			cli__status_line(sub.id, ch.from + (uint32_t)ch.n, t0,
			                 ch.state ? ch.state : "", false);
		if (rc)
			break;
		if (ch.done) {
			double dt = cli__now() - t0;

			if (c->json)
				printf("{\"event\":\"done\",\"id\":%" PRIu64
				       ",\"finish\":\"%s\",\"generated\":%u,\"cached\":%u,"
				       "\"seconds\":%.3f,\"tokens_per_s\":%.1f}\n",
				       sub.id, ch.finish, ch.generated, ch.cached, dt,
				       dt > 0 ? ch.generated / dt : 0.0);
			else
				putchar('\n');
			fflush(stdout);
			if (live || summary)
				cli__status_line(sub.id, ch.generated, t0, ch.finish, true);
			break;
		}
	}
	igc_stream_close(s);
	igc_close(cl);
	if (rc) {
		if (live)
			fputc('\n', stderr);
		return cli__fail(c, sub.id, &err);
	}
	return 0;
}

static void cli__jkey_str(const char *key, const char *val, bool comma)
{
	printf("%s\"%s\":", comma ? "," : "", key);
	cli__jstr(val, strlen(val));
}

static int cli_status(const struct cli *c)
{
	struct igc_client *cl;
	struct igc_model m;
	struct igc_stats *st = malloc(sizeof(*st));
	struct igc_error err;
	int rc;

	if (!st)
		return 1;
	rc = igc_connect(&cl, c->server, c->rtdir, &err);
	if (!rc) {
		igc_set_timeout(cl, 5000);
		rc = igc_model_info(cl, &m, &err);
		if (!rc)
			rc = igc_stats(cl, st, &err);
		igc_close(cl);
	}
	if (rc) {
		free(st);
		fprintf(stderr, "ignis-client: %s\n", err.message);
		return 1;
	}
	if (c->json) {
		printf("{\"model\":{");
		cli__jkey_str("name", m.name, false);
		cli__jkey_str("backend", m.backend, true);
		cli__jkey_str("kv_format", m.kv_format, true);
		cli__jkey_str("tokenizer", m.tokenizer, true);
		printf(
		    ",\"vocab\":%u,\"eos\":%u,\"context_tokens\":%" PRIu64
		    ",\"page_tokens\":%" PRIu64 ",\"pool_pages\":%" PRIu64
		    ",\"lanes\":%u,\"chunk_tokens\":%u,\"default_max_tokens\":%u,\"serving\":%s}",
		    m.vocab, m.eos, m.context_tokens, m.page_tokens, m.pool_pages, m.lanes,
		    m.chunk_tokens, m.default_max_tokens, m.serving ? "true" : "false");
		printf(",\"frontdoor\":{\"uptime_ms\":%" PRIu64, st->uptime_ms);
		cli__jkey_str("worker", st->worker, true);
		printf(
		    ",\"worker_pid\":%u,\"worker_restarts\":%" PRIu64
		    ",\"live\":%u,\"queued\":%u,\"kept\":%u,\"waiting\":%u,\"submitted\":%" PRIu64
		    ",\"finished\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"refused\":%" PRIu64
		    ",\"rejected\":%" PRIu64 ",\"tokens\":%" PRIu64 ",\"slot_waits\":%" PRIu64
		    "},\"requests\":[",
		    st->worker_pid, st->worker_restarts, st->live, st->queued, st->kept,
		    st->waiting, st->submitted, st->finished, st->failed, st->refused, st->rejected,
		    st->tokens, st->slot_waits);
		for (size_t i = 0; i < st->n_requests; i++) {
			const struct igc_stats_request *r = &st->requests[i];

			printf("%s{\"id\":%" PRIu64, i ? "," : "", r->id);
			cli__jkey_str("state", r->state, true);
			cli__jkey_str("class", r->cls, true);
			cli__jkey_str("finish", r->finish, true);
			printf(",\"prompt_tokens\":%u,\"max_tokens\":%u,\"generated\":%u,\"age_"
			       "ms\":%" PRIu64 "}",
			       r->prompt_tokens, r->max_tokens, r->generated, r->age_ms);
		}
		printf("]}\n");
	} else {
		printf("model     %s (%s, KV %s)%s\n", m.name, m.backend, m.kv_format,
		       m.serving ? "" : " - not served: a built-in description, no model file");
		printf("          context %" PRIu64 " tokens, vocab %u, tokenizer %s, %" PRIu64
		       " KV pages of %" PRIu64 " tokens, %u lanes, prefill chunk %u, default "
		       "max_tokens %u\n",
		       m.context_tokens, m.vocab,
		       strcmp(m.tokenizer, "none") ? m.tokenizer : "none (ids only)", m.pool_pages,
		       m.page_tokens, m.lanes, m.chunk_tokens, m.default_max_tokens);
		printf("worker    %s (pid %u), lost %" PRIu64 " times\n", st->worker,
		       st->worker_pid, st->worker_restarts);
		printf(
		    "requests  %u running, %u queued for a worker slot, %u finished and kept, %u "
		    "clients waiting\n",
		    st->live, st->queued, st->kept, st->waiting);
		printf("totals    %" PRIu64 " admitted, %" PRIu64 " finished, %" PRIu64
		       " failed, %" PRIu64 " refused, %" PRIu64 " bad messages, %" PRIu64
		       " tokens, %" PRIu64 " waits for a worker slot\n",
		       st->submitted, st->finished, st->failed, st->refused, st->rejected,
		       st->tokens, st->slot_waits);
		if (st->n_requests)
			printf("%8s  %-9s  %-11s  %6s  %9s  %-9s  %s\n", "ID", "STATE", "CLASS",
			       "PROMPT", "GENERATED", "FINISH", "AGE");
		for (size_t i = 0; i < st->n_requests; i++) {
			const struct igc_stats_request *r = &st->requests[i];
			char gen[32];

			snprintf(gen, sizeof(gen), "%u/%u", r->generated, r->max_tokens);
			printf("%8" PRIu64 "  %-9s  %-11s  %6u  %9s  %-9s  %.1fs\n", r->id,
			       r->state, r->cls, r->prompt_tokens, gen,
			       r->finish[0] ? r->finish : "-", r->age_ms / 1000.0);
		}
	}
	free(st);
	return 0;
}

static int cli_cancel(const struct cli *c, const char *arg)
{
	struct igc_client *cl;
	struct igc_request r;
	struct igc_error err;
	uint64_t id;
	bool running;
	int rc;

	if (cli__uint("ID", arg, UINT64_MAX, &id))
		return 2;
	if (!id)
		return bad("ID", arg, "a request id 1..18446744073709551615");
	rc = igc_connect(&cl, c->server, c->rtdir, &err);
	if (rc)
		return cli__fail(c, id, &err);
	rc = igc_status(cl, id, &r, &err);
	running = !rc && !r.done;
	if (!rc)
		rc = igc_cancel(cl, id, &err);
	igc_close(cl);
	if (rc)
		return cli__fail(c, id, &err);
	printf(running ? "request %" PRIu64 " cancelled after %u tokens\n"
	               : "request %" PRIu64 " (finished, %u tokens) forgotten\n",
	       id, r.generated);
	return 0;
}

/* A file's whole text (a grammar or a schema), kept until the exit. */
static int cli__file(const char *opt, const char *path, const char **out)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "ignis-client: %s '%s': %s\n", opt, path, strerror(errno));
		return 2;
	}
	for (;;) {
		size_t got;

		if (n + 4096 + 1 > cap) {
			char *b = realloc(buf, cap = 2 * cap + 8192);

			if (!b) {
				free(buf);
				fclose(f);
				fprintf(stderr, "ignis-client: %s '%s': out of memory\n", opt,
				        path);
				return 2;
			}
			buf = b;
		}
		got = fread(buf + n, 1, 4096, f);
		n += got;
		if (got < 4096)
			break;
	}
	fclose(f);
	buf[n] = '\0';
	if (!n || strlen(buf) != n) {
		free(buf);
		return bad(opt, path, "a file holding text, not empty and without NUL bytes");
	}
	*out = buf;
	return 0;
}

int main(int argc, char **argv)
{
	enum {
		O_PROMPT = 256,
		O_IDS,
		O_CLASS,
		O_MAX,
		O_SEED,
		O_TEMP,
		O_TOPP,
		O_TOPK,
		O_STOP,
		O_GRAMMAR,
		O_SCHEMA,
		O_TRIGGER
	};
	static const struct option opts[] = {
	    {"server", required_argument, NULL, 'S'},
	    {"runtime-dir", required_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},
	    {"prompt", required_argument, NULL, O_PROMPT},
	    {"ids", required_argument, NULL, O_IDS},
	    {"class", required_argument, NULL, O_CLASS},
	    {"max-tokens", required_argument, NULL, O_MAX},
	    {"seed", required_argument, NULL, O_SEED},
	    {"temperature", required_argument, NULL, O_TEMP},
	    {"top-p", required_argument, NULL, O_TOPP},
	    {"top-k", required_argument, NULL, O_TOPK},
	    {"stop", required_argument, NULL, O_STOP},
	    {"grammar", required_argument, NULL, O_GRAMMAR},
	    {"json-schema", required_argument, NULL, O_SCHEMA},
	    {"grammar-trigger", required_argument, NULL, O_TRIGGER},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	static struct cli c;
	bool gen_opts = false;
	const char *verb;
	uint64_t v;
	int o;

	igc_params_init(&c.p);
	c.p.stop = c.stops;
	opterr = 0;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o >= O_PROMPT)
			gen_opts = true;
		switch (o) {
		case 'S':
			c.server = optarg;
			break;
		case 'r':
			c.rtdir = optarg;
			break;
		case 'j':
			c.json = true;
			break;
		case O_PROMPT:
			if (c.have_prompt)
				return bad("--prompt", optarg,
				           "one --prompt or one --ids, not both");
			if (!*optarg)
				return bad("--prompt", optarg, "a non-empty text");
			c.p.text = optarg;
			c.have_prompt = true;
			break;
		case O_IDS:
			if (c.have_prompt)
				return bad("--ids", optarg, "one --prompt or one --ids, not both");
			if (cli__ids(&c, optarg))
				return 2;
			c.have_prompt = true;
			break;
		case O_CLASS:
			if (strcmp(optarg, "interactive") && strcmp(optarg, "agent"))
				return bad("--class", optarg, "interactive, agent");
			c.p.cls = optarg;
			break;
		case O_MAX:
			if (cli__uint("--max-tokens", optarg, UINT32_MAX, &v))
				return 2;
			c.p.max_tokens = (uint32_t)v;
			break;
		case O_SEED:
			if (cli__uint("--seed", optarg, UINT64_MAX, &c.p.seed))
				return 2;
			break;
		case O_TEMP:
			if (cli__real("--temperature", optarg, 0, 100, &c.p.temperature))
				return 2;
			break;
		case O_TOPP:
			if (cli__real("--top-p", optarg, 0, 1, &c.p.top_p))
				return 2;
			break;
		case O_TOPK:
			if (cli__uint("--top-k", optarg, UINT32_MAX, &v))
				return 2;
			c.p.top_k = (uint32_t)v;
			break;
		case O_STOP:
			if (c.p.n_stop == CLI_STOP_MAX || !*optarg || strlen(optarg) > 64)
				return bad("--stop", optarg, "up to 8 stop strings of 1..64 bytes");
			c.stops[c.p.n_stop++] = optarg;
			break;
		case O_GRAMMAR:
		case O_SCHEMA:
			if (c.p.grammar || c.p.json_schema)
				return bad(o == O_GRAMMAR ? "--grammar" : "--json-schema", optarg,
				           "one --grammar FILE or one --json-schema FILE");
			if (cli__file(o == O_GRAMMAR ? "--grammar" : "--json-schema", optarg,
			              o == O_GRAMMAR ? &c.p.grammar : &c.p.json_schema))
				return 2;
			break;
		case O_TRIGGER:
			if (!*optarg || strlen(optarg) > 256)
				return bad("--grammar-trigger", optarg, "a text of 1..256 bytes");
			c.p.grammar_trigger = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			fprintf(stderr, "ignis-client: unknown or incomplete option '%s'\n",
			        argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	verb = argv[optind];
	if (!strcmp(verb, "generate") && optind + 1 == argc)
		return cli_generate(&c);
	if (gen_opts && strcmp(verb, "generate")) {
		fprintf(stderr, "ignis-client: %s takes no generation options\n", verb);
		return 2;
	}
	if (!strcmp(verb, "status") && optind + 1 == argc)
		return cli_status(&c);
	if (!strcmp(verb, "cancel") && optind + 2 == argc)
		return cli_cancel(&c, argv[optind + 1]);
	fprintf(stderr, "ignis-client: unknown command or extra arguments: '%s'\n", verb);
	usage(stderr);
	return 2;
}
