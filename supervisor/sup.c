/*
 * sup.c - `ignis-supervisor start`: the runtime directory, the control
 * socket, the two daemons and the loop that watches them.
 *
 * Start order: kvstore first (the worker depends on it), then the worker,
 * each after the previous one said hello. Stop order is the reverse. One
 * thread: each loop turn serves at most one control request (waiting up to
 * SUP_TICK_MS), reaps exited children and advances each child's state.
 */
#define _GNU_SOURCE
#include "sup.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "config.h"
#include "plan.h"
#include "common/event.h"
#include "frontdoor.h"
#include "http.h"
#include "metsrv.h"
#include "model/bpe.h"
#include "model/mfile.h"
#include "proc.h"
#include "common/rtdir.h"
#include "proto/service.h"
#include "version.h"

#define SUP_TICK_MS 100
#define SUP_NPROC   2

/* Signal flags: the one kind of mutable global the style allows (rule 13). */
static volatile sig_atomic_t sup__signal;

static void sup__on_signal(int sig)
{
	sup__signal = sig;
}

static void sup__on_sigchld(int sig)
{
	(void)sig; /* wakes the loop out of its wait; reaping happens there */
}

struct sup {
	struct proc_env env;
	struct svc svc;
	struct proc procs[SUP_NPROC]; /* start order */
	struct vplan plan;
	struct msg plan_msg;       /* the worker's greeting */
	char model_path[PATH_MAX]; /* --model FILE, absolute; a built-in's synthetic
	                              weights in the runtime directory; "" for a
	                              built-in that is only planned for */
	bool builtin_weights;      /* model_path is ours: removed at the end */
	struct msg kv_msg;         /* the kvstore daemon's greeting */
	char arena_name[96], disk_path[PATH_MAX];
	bool stopping;
	struct metsrv *met; /* the metrics page */
	struct door *door;  /* the client front door */
	struct http *http;  /* OpenAI's HTTP API, or NULL (off) */
	struct bpe *bpe;    /* the model file's tokenizer, for the API's /tokenize */
	char api_key[257];  /* the HTTP API's key, "" for none */
};

/* The HTTP API's key: --server-api-key-file's first line (its newline left
 * out), else --server-api-key; "" for none. A file that cannot be read, or
 * holds no key, is IG_E_CONFIG naming it. */
static int sup__api_key(const struct knobs *k, char *key, size_t cap, struct ig_errbuf *eb)
{
	const char *path = k->v[KNOB_SERVER_API_KEY_FILE].s;
	struct knob_value v;
	char line[512];
	FILE *f;
	size_t n;

	key[0] = '\0';
	if (!path || !*path) {
		if (k->v[KNOB_SERVER_API_KEY].s)
			snprintf(key, cap, "%s", k->v[KNOB_SERVER_API_KEY].s);
		return IG_E_OK;
	}
	if (!(f = fopen(path, "r")))
		return ig_errf(eb, IG_E_CONFIG, "--server-api-key-file '%s': cannot read it (%s)",
		               path, strerror(errno));
	if (!fgets(line, sizeof line, f))
		line[0] = '\0';
	fclose(f);
	n = strcspn(line, "\r\n");
	line[n] = '\0';
	/* the key's own rule, with the file named as where it came from */
	if (knob_parse(KNOB_SERVER_API_KEY, line, path, &v, eb))
		return ig_errprefix(eb, "--server-api-key-file '%s'", path);
	snprintf(key, cap, "%s", line);
	return IG_E_OK;
}

/* The model file's chat template (malloc'd), or NULL when it has none or
 * the model is a built-in description. */
static char *sup__chat_template(const char *path)
{
	struct ig_errbuf eb;
	struct gguf g;
	const struct gguf_kv *kv;
	char *t = NULL;

	if (!path[0] || gguf_open(&g, path, &eb))
		return NULL;
	kv = gguf_find_kv(&g, "tokenizer.chat_template");
	if (kv && kv->type == GGUF_TYPE_STRING && (t = malloc(kv->v.str.len + 1))) {
		memcpy(t, kv->v.str.ptr, kv->v.str.len);
		t[kv->v.str.len] = '\0';
	}
	gguf_close(&g);
	return t;
}

/* The HTTP API's /metrics: ours and the gateway's names. */
static int sup__gateway_page(void *ctx, char **page, size_t *len)
{
	return metsrv_page(ctx, true, page, len);
}

/* OpenAI's HTTP API beside the door (--server-http-bind; off: none). */
static int sup__http_open(struct sup *s, const struct sup_opts *o, struct ig_errbuf *eb)
{
	const char *bind = o->cfg->k.v[KNOB_SERVER_HTTP_BIND].s;
	const struct mdesc *m = s->plan.model;
	char *tmpl;
	int rc;

	if (!strcmp(bind, "off"))
		return IG_E_OK;
	tmpl = sup__chat_template(s->model_path);
	/* /tokenize encodes here what the worker would run: the same file's
	 * vocabulary, read by the same code (model/bpe.h) */
	if (m->tokenizer == MDESC_TOK_GPT2 && s->model_path[0]) {
		struct gguf g;

		rc = gguf_open(&g, s->model_path, eb);
		if (!rc) {
			rc = bpe_open(&s->bpe, &g, eb);
			gguf_close(&g);
		}
		if (rc) {
			free(tmpl);
			return ig_errprefix(eb, "the model file's tokenizer (%s)", s->model_path);
		}
	}
	{
		const struct knobs *k = &o->cfg->k;
		struct http_opts ho = {
		    .bind = bind,
		    .allow_remote = k->v[KNOB_SERVER_ALLOW_REMOTE].u != 0,
		    .allow_no_key = k->v[KNOB_SERVER_ALLOW_REMOTE_WITHOUT_API_KEY].u != 0,
		    .api_key = s->api_key,
		    .cors_origins = k->v[KNOB_SERVER_CORS_ORIGINS].s,
		    .door = s->door,
		    .max_connections = (uint32_t)k->v[KNOB_SERVER_HTTP_MAX_CONNECTIONS].u,
		    .max_per_address =
		        (uint32_t)k->v[KNOB_SERVER_HTTP_MAX_CONNECTIONS_PER_ADDRESS].u,
		    .header_timeout_ms = (uint32_t)k->v[KNOB_SERVER_HTTP_HEADER_TIMEOUT].u * 1000u,
		    .body_timeout_ms = (uint32_t)k->v[KNOB_SERVER_HTTP_BODY_TIMEOUT].u * 1000u,
		    .model = m->name,
		    .names = k->v[KNOB_SERVED_MODEL_NAME].s,
		    /* a GPT2 description without a file has no vocabulary here */
		    .tokenizer =
		        m->tokenizer == MDESC_TOK_GPT2 && !s->bpe ? MDESC_TOK_NONE : m->tokenizer,
		    .bpe = s->bpe,
		    .chat_template = tmpl,
		    .limits = {.max_body = 1u << 20,
		               .max_tokens = (uint32_t)s->plan.context,
		               .vocab = m->vocab,
		               .max_prompt_ids = MSG_IDS_MAX,
		               .max_text = 4u * MSG_TEXT_MAX,
		               .max_messages = 1024},
		    .metrics_page = s->met ? sup__gateway_page : NULL,
		    .metrics_ctx = s->met,
		};

		rc = http_open(&s->http, &ho, eb);
		if (!rc && !door_hostport_is_loopback(bind)) {
			struct ev e;

			ev_begin(&e, EV_WARN, "ignis.http.remote");
			ev_str(&e, "http", bind);
			ev_bool(&e, "api_key", s->api_key[0] != '\0');
			ev_str(&e, "risk",
			       s->api_key[0]
			           ? "whoever holds the key can submit requests"
			           : "whoever reaches the address can submit requests and "
			             "read the metrics: no API key");
			ev_end(&e);
		}
	}
	free(tmpl);
	return rc;
}

/* True when no child is left running (a child that would not stop keeps
 * its shared memory). */
static bool sup__children_gone(const struct sup *s)
{
	for (int i = 0; i < SUP_NPROC; i++)
		if (s->procs[i].pid > 0)
			return false;
	return true;
}

static bool sup__shm_exists(const char *name)
{
	char path[160];

	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	return access(path, F_OK) == 0;
}

/* The kvstore daemon's tiers: the KV-RAM arena's shared-memory name (one per
 * user and runtime directory, so two systems on one host never share it),
 * its size, and KV-disk's directory and ceiling (0: off). */
static int sup__kv_config(struct sup *s, const struct knobs *k, struct ig_errbuf *eb)
{
	struct msg_kv_config *c = &s->kv_msg.u.kv_config;
	const char *flag = k->v[KNOB_REUSE_KV_DISK_PATH].s;
	uint64_t h = 1469598103934665603ull; /* FNV-1a of the runtime directory */

	for (const char *p = s->env.rtdir; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	snprintf(s->arena_name, sizeof(s->arena_name), "ignis-kvram-%u-%016llx", (unsigned)getuid(),
	         (unsigned long long)h);
	s->disk_path[0] = '\0';
	if (k->v[KNOB_REUSE_KV_DISK_BYTES].u) {
		const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

		if (flag && *flag)
			snprintf(s->disk_path, sizeof(s->disk_path), "%s", flag);
		else if (state && *state)
			snprintf(s->disk_path, sizeof(s->disk_path), "%s/ignis/kv-disk", state);
		else if (home && *home)
			snprintf(s->disk_path, sizeof(s->disk_path),
			         "%s/.local/state/ignis/kv-disk", home);
		else
			return ig_errf(
			    eb, IG_E_CONFIG,
			    "KV-disk is on but has no directory: set --reuse-kv-disk-path "
			    "(neither XDG_STATE_HOME nor HOME is set)");
	}
	memset(&s->kv_msg, 0, sizeof(s->kv_msg));
	s->kv_msg.type = MSG_KV_CONFIG;
	c->arena_name = msg_str_of(s->arena_name);
	c->arena_bytes = k->v[KNOB_REUSE_KV_RAM_BYTES].u;
	c->disk_path = msg_str_of(s->disk_path);
	c->disk_bytes = s->disk_path[0] ? k->v[KNOB_REUSE_KV_DISK_BYTES].u : 0;
	c->interactive_ttl_s = k->v[KNOB_REUSE_RETAINED_INTERACTIVE_TTL].u;
	/* the retained host slots: one state image each, in the KV-RAM object
	 * beside --reuse-kv-ram-bytes (ADR 0016) */
	c->retained_slots = s->plan.retained_host;
	c->slot_bytes = s->plan.retained_host
	                    ? mdesc_state_image_bytes(s->plan.model) + s->plan.window_bytes
	                    : 0;
	return IG_E_OK;
}

/* A built-in description whose synthetic weights are at most this large is
 * served: the supervisor writes them (seed SUP_BUILTIN_SEED, bf16: what
 * `make run` and `ignis-mkmodel --preset NAME --seed 1` write) into the
 * runtime directory and hands the worker that file, so that a start on the
 * embedded default, or on etc/ignis.yaml, serves a model. The reference
 * models (tens of GB) stay descriptions to plan for (docs/adr/0019). */
#define SUP_BUILTIN_MAX_BYTES (256ull << 20)
#define SUP_BUILTIN_SEED      1

/* The synthetic file of built-in `m` in the runtime directory, into `path`;
 * "" when `m` is too large to serve that way. */
static int sup__builtin_weights(struct sup *s, const struct mdesc *m, struct ig_errbuf *eb)
{
	struct mfile_synthetic syn;
	int rc;

	s->model_path[0] = '\0';
	rc = mfile_synthetic_describe(m, MFILE_BF16, &syn, eb);
	if (rc || syn.file_bytes > SUP_BUILTIN_MAX_BYTES)
		return IG_E_OK; /* a description to plan for: no weights to serve */
	if (snprintf(s->model_path, sizeof(s->model_path), "%s/model-%s-seed%d.gguf", s->env.rtdir,
	             m->name, SUP_BUILTIN_SEED) >= (int)sizeof(s->model_path))
		return ig_errf(eb, IG_E_CONFIG, "runtime directory '%s' is too long", s->env.rtdir);
	rc = mfile_write_synthetic(m, SUP_BUILTIN_SEED, MFILE_BF16, s->model_path, eb);
	if (rc) {
		s->model_path[0] = '\0';
		return ig_errprefix(eb, "cannot write the weights of built-in model '%s'", m->name);
	}
	s->builtin_weights = true;
	{
		struct ev e;

		ev_begin(&e, EV_INFO, "ignis.supervisor.builtin_weights");
		ev_str(&e, "model", m->name);
		ev_str(&e, "path", s->model_path);
		ev_u64(&e, "bytes", syn.file_bytes);
		ev_u64(&e, "seed", SUP_BUILTIN_SEED);
		ev_end(&e);
	}
	return IG_E_OK;
}

/* How long an operator's restart waits for the daemon spawned again to
 * serve: its hello (PROC_HELLO_TIMEOUT_MS at most) and its greeting's
 * answer (5 s at most). With the orderly stop before it, under the 30 s
 * `ignis-supervisor restart` waits for the answer. */
#define SUP_RESTART_WAIT_MS (PROC_HELLO_TIMEOUT_MS + 5000u)

/* Wait until `p`, just spawned, serves: hello answered and greeting
 * acknowledged (RUNNING). The loop's turns are the caller's meanwhile:
 * children are reaped here, the other daemon's pings wait. A daemon that
 * dies on the way is spawned again after its backoff, as by the loop; one
 * that refuses its greeting fails (the loop then stops the system, as
 * after any refused handshake). */
static void sup__reap(struct sup *s);

static int sup__await_serving(struct sup *s, struct proc *p, struct ig_errbuf *eb)
{
	uint64_t deadline = clk_mono_ms() + SUP_RESTART_WAIT_MS;

	while (p->state != PROC_RUNNING) {
		int rc;

		if (sup__signal)
			return ig_errf(eb, IG_E_BUSY, "the supervisor is stopping");
		if (clk_mono_ms() >= deadline)
			return ig_errf(eb, IG_E_TIMEOUT,
			               "%s was spawned again but does not serve after %u ms (state "
			               "%s): the supervisor keeps watching it",
			               p->program, SUP_RESTART_WAIT_MS, proc_state_name(p->state));
		sup__reap(s);
		rc = proc_tick(p, &s->env, clk_mono_ms(), eb);
		if (rc) {
			snprintf(p->why_failed, sizeof(p->why_failed), "refused its greeting: %s",
			         eb->msg);
			return rc;
		}
		if (p->state != PROC_RUNNING)
			clk_sleep_ms(20);
	}
	return IG_E_OK;
}

/* An operator's restart of one daemon: an orderly stop (shutdown, then
 * SIGTERM, then SIGKILL), a spawn at once, and the answer once the new
 * daemon serves (its hello and greeting done), so that what the operator
 * does next finds it configured. The other daemon keeps running. */
static int sup__restart(struct sup *s, struct msg_str role, struct msg *reply, struct ig_errbuf *eb)
{
	struct proc *p = NULL;
	struct ev e;
	int rc;

	for (int i = 0; i < SUP_NPROC; i++)
		if (msg_str_eq(role, s->procs[i].role) ||
		    (msg_str_eq(role, "worker") && !strcmp(s->procs[i].role, "gpu-worker")))
			p = &s->procs[i];
	if (!p)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "restart.role: '%.*s'; accepted: kvstore, gpu-worker (or worker)",
		               (int)role.n, role.p);
	if (s->stopping)
		return ig_errf(eb, IG_E_BUSY, "the supervisor is stopping");
	ev_begin(&e, EV_INFO, "ignis.supervisor.child_restarting");
	ev_str(&e, "role", p->role);
	ev_str(&e, "reason", "operator");
	ev_end(&e);
	proc_stop(p, &s->env);
	p->streak = 0;
	rc = proc_spawn(p, &s->env, eb);
	if (rc)
		return rc;
	p->restarts++;
	rc = sup__await_serving(s, p, eb);
	if (rc)
		return rc;
	reply->type = MSG_ACK;
	reply->u.ack.of = MSG_RESTART;
	return IG_E_OK;
}

/* The control socket's handler: everything but hello/ping/shutdown. */
static int sup__handle(void *ctx, const struct msg *req, struct msg *reply, struct ig_errbuf *eb)
{
	struct sup *s = ctx;
	uint64_t now = clk_mono_ms();

	if (req->type == MSG_RESTART)
		return sup__restart(s, req->u.restart.role, reply, eb);
	if (req->type != MSG_STATUS)
		return ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		               "the supervisor does not take '%s' messages",
		               msg_type_name(req->type));
	reply->type = MSG_STATUS_REPLY;
	reply->u.status_reply.seq = req->u.status.seq;
	reply->u.status_reply.procs.n = 1 + SUP_NPROC;
	reply->u.status_reply.procs.v[0] = (struct msg_proc){
	    .role = msg_str_of("supervisor"),
	    .pid = (uint64_t)s->env.self,
	    .state = msg_str_of(s->stopping ? "stopping" : "running"),
	    .uptime_ms = svc_uptime_ms(&s->svc),
	    .restarts = 0,
	};
	for (int i = 0; i < SUP_NPROC; i++) {
		const struct proc *p = &s->procs[i];

		reply->u.status_reply.procs.v[1 + i] = (struct msg_proc){
		    .role = msg_str_of(p->role),
		    .pid = (uint64_t)(p->pid > 0 ? p->pid : 0),
		    .state = msg_str_of(proc_state_name(p->state)),
		    .uptime_ms = p->state == PROC_RUNNING ? now - p->ready_ms : 0,
		    .restarts = p->restarts,
		};
	}
	return IG_E_OK;
}

static void sup__reap(struct sup *s)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);

		if (pid <= 0)
			return;
		for (int i = 0; i < SUP_NPROC; i++)
			if (s->procs[i].pid == pid)
				proc_exited(&s->procs[i], status, clk_mono_ms(), s->stopping);
	}
}

static void sup__stop_children(struct sup *s)
{
	for (int i = SUP_NPROC - 1; i >= 0; i--)
		proc_stop(&s->procs[i], &s->env);
	/* A child killed hard leaves its socket and lock behind: remove them, but
	 * never the files of a process that still holds its lock (one we could
	 * not kill, or another daemon started by hand on this directory). */
	for (int i = 0; i < SUP_NPROC; i++) {
		pid_t holder;

		if (!tp_remove_stale(s->env.rtdir, s->procs[i].sockname, &holder)) {
			struct ev e;

			ev_begin(&e, EV_WARN, "ignis.supervisor.socket_left");
			ev_str(&e, "role", s->procs[i].role);
			ev_u64(&e, "holder_pid", (uint64_t)holder);
			ev_str(&e, "reason", "a live process holds its lock");
			ev_end(&e);
		}
	}
}

static void sup__install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = sup__on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = sup__on_sigchld;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int sup_rtdir(const struct sup_opts *o, char *out, size_t cap, struct ig_errbuf *eb)
{
	const struct knob_raw *file = &o->cfg->in.yaml[KNOB_RUNTIME_DIR];
	char src[200];

	snprintf(src, sizeof(src), "config file %s", file->where);
	return rtdir_resolve(o->cfg->in.flag[KNOB_RUNTIME_DIR].text, file->text, src, out, cap, eb);
}

int sup_plan(const struct sup_opts *o)
{
	struct ig_errbuf eb;
	struct vplan p;
	int rc;

	ev_setup("supervisor", STDOUT_FILENO);
	rc = cfg_resolve(o->cfg, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	rc = plan_make(&o->cfg->k, false, &p, &eb);
	if (rc == IG_E_PLAN_REFUSED) {
		fprintf(stderr, "ignis-supervisor: the VRAM plan refuses the start: %s\n",
		        p.refusal);
		return PLAN_EXIT_REFUSED;
	}
	if (rc) {
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	if (!o->json) {
		plan_print(stdout, &p, &o->cfg->k);
		fflush(stdout);
	}
	plan_emit(&p, &o->cfg->k);
	return PLAN_EXIT_OK;
}

int sup_start(const struct sup_opts *o)
{
	static struct sup s; /* large (proc paths); one per process */
	char self_exe[PATH_MAX];
	struct ig_errbuf eb;
	const char *why = NULL;
	bool announced = false;
	int exit_code = 0;
	struct ev e;
	ssize_t n;
	int rc;

	ev_setup("supervisor", STDOUT_FILENO);
	memset(&s, 0, sizeof(s));
	rc = cfg_resolve(o->cfg, &eb);
	if (!rc)
		rc = door_check_bind(o->cfg->k.v[KNOB_SERVER_BIND].s,
		                     o->cfg->k.v[KNOB_SERVER_ALLOW_REMOTE].u != 0, &eb);
	if (!rc)
		rc = sup__api_key(&o->cfg->k, s.api_key, sizeof s.api_key, &eb);
	if (!rc)
		rc = http_check_bind(
		    o->cfg->k.v[KNOB_SERVER_HTTP_BIND].s,
		    o->cfg->k.v[KNOB_SERVER_ALLOW_REMOTE].u != 0, s.api_key[0] != '\0',
		    o->cfg->k.v[KNOB_SERVER_ALLOW_REMOTE_WITHOUT_API_KEY].u != 0, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	/* The plan comes first: a start that cannot hold one full context is
	 * refused before anything is created. */
	rc = plan_make(&o->cfg->k, true, &s.plan, &eb);
	if (rc == IG_E_PLAN_REFUSED) {
		fprintf(stderr, "ignis-supervisor: the VRAM plan refuses the start: %s\n",
		        s.plan.refusal);
		return PLAN_EXIT_REFUSED;
	}
	if (rc) {
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	plan_emit(&s.plan, &o->cfg->k);
	/* CUDA numbers devices fastest first unless told otherwise; NVML, which
	 * read the free memory, numbers them by PCI bus: make them agree for the
	 * worker (an operator's own setting stays). */
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0);
	s.env.self = getpid();
	rc = sup_rtdir(o, s.env.rtdir, sizeof(s.env.rtdir), &eb);
	if (!rc)
		rc = rtdir_prepare(s.env.rtdir, &eb);
	if (rc) {
		/* The runtime directory is configuration: refused as such. */
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		snprintf(self_exe, sizeof(self_exe), "%s", o->argv0);
	else
		self_exe[n] = '\0';
	proc_init(&s.procs[0], "kvstore", "ignis-kvstored", "kvstore", "kvstore-daemon");
	proc_init(&s.procs[1], "gpu-worker", "ignis-gpu-worker", "gpu-worker", "gpu-worker");
	/* a model file is handed to the worker by its absolute path: the
	 * worker may not share our working directory for ever */
	if (!mdesc_find(o->cfg->k.v[KNOB_MODEL].s) &&
	    !realpath(o->cfg->k.v[KNOB_MODEL].s, s.model_path)) {
		fprintf(stderr, "ignis-supervisor: --model '%s': %s\n", o->cfg->k.v[KNOB_MODEL].s,
		        strerror(errno));
		return PLAN_EXIT_CONFIG;
	}
	rc = sup__kv_config(&s, &o->cfg->k, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	s.procs[0].greeting = &s.kv_msg;
	for (int i = 0; i < SUP_NPROC; i++) {
		rc = proc_locate(&s.procs[i], self_exe, o->bin_dir, &eb);
		if (rc) {
			fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
			return 1;
		}
	}
	sup__install_signals();
	rc = svc_open(&s.svc, "supervisor", s.env.rtdir, "supervisor", 0, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: cannot start: %s\n", eb.msg);
		return 1;
	}
	/* the runtime directory is ours now (we hold its supervisor.lock): a
	 * built-in's weights can go there */
	if (mdesc_find(o->cfg->k.v[KNOB_MODEL].s))
		rc = sup__builtin_weights(&s, mdesc_find(o->cfg->k.v[KNOB_MODEL].s), &eb);
	/* before any child: an address in use refuses the start */
	if (!rc)
		rc = metsrv_open(&s.met, &o->cfg->k.v[KNOB_SERVER_METRICS_BIND], s.env.rtdir,
		                 &s.plan, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: cannot start: %s\n", eb.msg);
		if (s.builtin_weights)
			unlink(s.model_path);
		svc_close(&s.svc);
		rmdir(s.env.rtdir);
		return 1;
	}
	plan_to_msg(&s.plan, &o->cfg->k, s.model_path, &s.plan_msg);
	s.procs[1].greeting = &s.plan_msg;
	{
		struct door_opts dopt = {.bind = o->cfg->k.v[KNOB_SERVER_BIND].s,
		                         .rtdir = s.env.rtdir,
		                         .queue_max =
		                             (uint32_t)o->cfg->k.v[KNOB_SERVER_MAX_QUEUED].u};

		door_model_of(&s.plan_msg.u.plan, s.plan.model, &dopt.model);
		rc = door_open(&s.door, &dopt, &eb);
	}
	if (rc)
		fprintf(stderr, "ignis-supervisor: cannot start the front door: %s\n", eb.msg);
	else if ((rc = sup__http_open(&s, o, &eb))) {
		door_close(s.door);
		fprintf(stderr, "ignis-supervisor: cannot start the HTTP API: %s\n", eb.msg);
	}
	if (rc) {
		metsrv_close(s.met);
		if (s.builtin_weights)
			unlink(s.model_path);
		svc_close(&s.svc);
		rmdir(s.env.rtdir);
		return 1;
	}
	ev_begin(&e, EV_INFO, "ignis.supervisor.starting");
	ev_str(&e, "runtime_dir", s.env.rtdir);
	ev_str(&e, "config", o->cfg->path ? o->cfg->path : "(embedded default)");
	ev_str(&e, "build", IGNIS_VERSION);
	ev_u64(&e, "protocol", MSG_PROTO_VERSION);
	ev_str(&e, "metrics", metsrv_addr(s.met));
	ev_str(&e, "http", s.http ? http_addr(s.http) : "off");
	ev_end(&e);

	rc = proc_spawn(&s.procs[0], &s.env, &eb);
	while (rc == IG_E_OK && !sup__signal && !svc_stop_requested(&s.svc)) {
		uint64_t now;

		rc = svc_poll(&s.svc, SUP_TICK_MS, sup__handle, &s);
		if (rc) {
			snprintf(eb.msg, sizeof(eb.msg), "control socket failed: %s",
			         ig_err_str(rc));
			break;
		}
		sup__reap(&s);
		now = clk_mono_ms();
		for (int i = 0; i < SUP_NPROC && rc == IG_E_OK; i++) {
			struct proc *p = &s.procs[i];

			rc = proc_tick(p, &s.env, now, &eb);
			if (rc == IG_E_OK && p->state == PROC_FAILED)
				rc = ig_errf(&eb, IG_E_CHILD, "%s %s: see its messages above",
				             p->program, p->why_failed);
			/* The next one starts once this one is up for the first time. */
			if (rc == IG_E_OK && i + 1 < SUP_NPROC && p->state == PROC_RUNNING &&
			    s.procs[i + 1].state == PROC_IDLE && !s.procs[i + 1].ever_ready)
				rc = proc_spawn(&s.procs[i + 1], &s.env, &eb);
			if (rc == IG_E_OK && i == SUP_NPROC - 1 && p->state == PROC_RUNNING &&
			    !announced) {
				announced = true;
				ev_begin(&e, EV_INFO, "ignis.supervisor.started");
				ev_str(&e, "runtime_dir", s.env.rtdir);
				ev_str(&e, "socket", s.svc.lis.path);
				ev_end(&e);
			}
		}
		metsrv_note_procs(s.met, s.procs, SUP_NPROC);
		{
			uint64_t rejected, queued;
			struct http_counts hc;
			uint64_t displaced;

			door_counts(s.door, &rejected, &queued, &displaced);
			http_counts(s.http, &hc);
			metsrv_note_rejects(s.met, rejected, s.svc.rejects.total);
			metsrv_note_queued(s.met, queued);
			metsrv_note_doors(s.met, displaced, &hc);
		}
		door_set_worker(s.door, s.procs[1].state == PROC_RUNNING ? s.procs[1].pid : 0,
		                proc_state_name(s.procs[1].state));
		http_set_ready(s.http, s.procs[1].state == PROC_RUNNING);
	}
	if (rc) {
		exit_code = 1;
		why = "error";
		ev_begin(&e, EV_ERROR, "ignis.supervisor.failed");
		ev_str(&e, "error_code", ig_err_name(rc));
		ev_str(&e, "message", eb.msg);
		ev_end(&e);
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
	} else if (sup__signal) {
		why = sup__signal == SIGTERM ? "SIGTERM" : "SIGINT";
	} else {
		why = "stop request";
	}
	s.stopping = true;
	http_set_ready(s.http, false);
	door_set_worker(s.door, 0, "stopping"); /* running requests end, clients told */
	ev_begin(&e, EV_INFO, "ignis.supervisor.stopping");
	ev_str(&e, "reason", why);
	ev_end(&e);
	sup__stop_children(&s);
	/* KV-RAM outlives a kvstore restart, not the system: the worker that
	 * knew its sequences is gone (docs/adr/0012). Only an object a daemon
	 * of ours served: one it refused at the start (another size, another
	 * layout, not an arena at all) is left as found, for the remedy its
	 * refusal named (docs/adr/0020). */
	if (s.arena_name[0] && sup__children_gone(&s) && s.procs[0].ever_ready) {
		char shm[128];

		snprintf(shm, sizeof(shm), "/%s", s.arena_name);
		if (shm_unlink(shm) == 0)
			ev_msg(EV_INFO, "ignis.supervisor.kv_ram_removed", "%s", s.arena_name);
	} else if (s.arena_name[0] && !s.procs[0].ever_ready && sup__shm_exists(s.arena_name)) {
		ev_begin(&e, EV_WARN, "ignis.supervisor.kv_ram_kept");
		ev_str(&e, "arena", s.arena_name);
		ev_str(&e, "detail",
		       "the kvstore daemon never served this KV-RAM object (it refused it or did "
		       "not start): left as found, see the refusal above");
		ev_end(&e);
	}
	http_close(s.http); /* its streams are the door's clients: first */
	bpe_close(s.bpe);
	door_close(s.door);
	metsrv_close(s.met);
	svc_close(&s.svc);
	if (s.builtin_weights)
		unlink(s.model_path);
	rmdir(s.env.rtdir); /* only succeeds when nothing else is left in it */
	ev_begin(&e, EV_INFO, "ignis.supervisor.stopped");
	ev_str(&e, "reason", why);
	ev_end(&e);
	return exit_code;
}
