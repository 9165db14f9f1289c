/* proc.c - child processes of the supervisor (see proc.h). */
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/event.h"
#include "proto/transport.h"
#include "version.h"

const char *proc_state_name(enum proc_state s)
{
	switch (s) {
	case PROC_IDLE:
		return "stopped";
	case PROC_STARTING:
		return "starting";
	case PROC_RUNNING:
		return "running";
	case PROC_BACKOFF:
		return "restarting";
	case PROC_FAILED:
		return "failed";
	}
	return "unknown";
}

/* "exit code 3" / "signal 9 (Killed)" for a wait status. */
static void proc_describe_status(char *out, size_t cap, int status)
{
	if (WIFEXITED(status))
		snprintf(out, cap, "exit code %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(out, cap, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(out, cap, "wait status 0x%x", (unsigned)status);
}

void proc_init(struct proc *p, const char *role, const char *program, const char *sockname,
               const char *subdir)
{
	memset(p, 0, sizeof(*p));
	p->role = role;
	p->program = program;
	p->sockname = sockname;
	p->subdir = subdir;
	p->state = PROC_IDLE;
}

int proc_locate(struct proc *p, const char *self_exe, const char *bin_dir, struct ig_errbuf *eb)
{
	char selfdir[PATH_MAX], tried[1024] = "";
	char cand[3][PATH_MAX];
	int ncand = 0;
	char *slash;

	snprintf(selfdir, sizeof(selfdir), "%s", self_exe);
	slash = strrchr(selfdir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(selfdir, sizeof(selfdir), ".");
	if (bin_dir && *bin_dir)
		snprintf(cand[ncand++], PATH_MAX, "%.*s/%s", PATH_MAX - 64, bin_dir, p->program);
	snprintf(cand[ncand++], PATH_MAX, "%.*s/%s", PATH_MAX - 64, selfdir, p->program);
	snprintf(cand[ncand++], PATH_MAX, "%.*s/../%s/%s", PATH_MAX - 128, selfdir, p->subdir,
	         p->program);
	for (int i = 0; i < ncand; i++) {
		size_t used = strlen(tried);

		if (access(cand[i], X_OK) == 0) {
			if (!realpath(cand[i], p->exe))
				snprintf(p->exe, sizeof(p->exe), "%s", cand[i]);
			return IG_E_OK;
		}
		snprintf(tried + used, sizeof(tried) - used, "%s'%s'", i ? ", " : "", cand[i]);
		if (bin_dir && *bin_dir)
			break; /* an explicit --bin-dir is the only place looked */
	}
	return ig_errf(eb, IG_E_NOTFOUND,
	               "cannot find the %s program %s (looked at %s); build it (make) or name "
	               "its folder with --bin-dir",
	               p->role, p->program, tried);
}

static void proc__close_req(struct proc *p)
{
	if (p->req_open) {
		nng_close(p->req);
		p->req_open = false;
	}
}

int proc_spawn(struct proc *p, const struct proc_env *env, struct ig_errbuf *eb)
{
	char ppid[24];
	char *argv[] = {(char *)p->program,
	                "--runtime-dir",
	                (char *)env->rtdir,
	                "--supervisor-pid",
	                ppid,
	                NULL};
	struct ev e;
	pid_t pid;

	snprintf(ppid, sizeof(ppid), "%ld", (long)env->self);
	pid = fork();
	if (pid < 0)
		return ig_errf(eb, IG_E_CHILD, "cannot fork for %s: %s", p->program,
		               strerror(errno));
	if (pid == 0) {
		/* Child: async-signal-safe calls only until execv. */
		struct sigaction dfl;
		sigset_t none;
		int fd;

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != env->self)
			_exit(127); /* the supervisor died before we armed the signal */
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGPIPE, &dfl, NULL);
		sigaction(SIGTERM, &dfl, NULL);
		sigaction(SIGINT, &dfl, NULL);
		sigaction(SIGCHLD, &dfl, NULL);
		/* In its own process group a daemon is a background job: writing
		 * events to a terminal with `stty tostop` would stop it. */
		dfl.sa_handler = SIG_IGN;
		sigaction(SIGTTOU, &dfl, NULL);
		sigaction(SIGTTIN, &dfl, NULL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0) {
			dup2(fd, STDIN_FILENO);
			if (fd != STDIN_FILENO)
				close(fd);
		}
		execv(p->exe, argv);
		_exit(127);
	}
	setpgid(pid, pid); /* also from the parent: no window where it is in ours */
	p->pid = pid;
	p->state = PROC_STARTING;
	p->hello_killed = false;
	p->spawned_ms = clk_mono_ms();
	p->ready_ms = 0;
	p->ping_misses = 0;
	proc__close_req(p);
	ev_begin(&e, EV_INFO, "ignis.supervisor.child_started");
	ev_str(&e, "role", p->role);
	ev_u64(&e, "child_pid", (uint64_t)pid);
	ev_str(&e, "exe", p->exe);
	ev_u64(&e, "restarts", p->restarts);
	ev_end(&e);
	return IG_E_OK;
}

/* After hello: the greeting (the gpu-worker's plan), acknowledged or refused. */
static int proc__greet(struct proc *p, struct ig_errbuf *eb)
{
	struct tp_rx rx;
	int rc;

	if (!p->greeting)
		return IG_E_OK;
	nng_socket_set_ms(p->req, NNG_OPT_RECVTIMEO, 5000);
	rc = tp_call(p->req, p->greeting, &rx, eb);
	nng_socket_set_ms(p->req, NNG_OPT_RECVTIMEO, 250);
	if (rc)
		return ig_errprefix(eb, "%s (pid %ld) refused the %s", p->program, (long)p->pid,
		                    msg_type_name(p->greeting->type));
	if (rx.m.type != MSG_ACK || rx.m.u.ack.of != p->greeting->type)
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED, "%s (pid %ld) answered %s with '%s'",
		             p->program, (long)p->pid, msg_type_name(p->greeting->type),
		             msg_type_name(rx.m.type));
	tp_rx_release(&rx);
	return rc;
}

/* One hello exchange; IG_E_TIMEOUT means "not yet". */
static int proc__hello(struct proc *p, const struct proc_env *env, uint64_t now,
                       struct ig_errbuf *eb)
{
	struct msg req = {.type = MSG_HELLO};
	struct tp_rx rx;
	struct ev e;
	int rc;

	if (!p->req_open) {
		rc = tp_dial(&p->req, env->rtdir, p->sockname, 250, eb);
		if (rc)
			return rc;
		p->req_open = true;
	}
	req.u.hello.role = msg_str_of("supervisor");
	req.u.hello.pid = (uint64_t)env->self;
	req.u.hello.build = msg_str_of(IGNIS_VERSION);
	rc = tp_call(p->req, &req, &rx, eb);
	if (rc == IG_E_TIMEOUT || rc == IG_E_CLOSED)
		return IG_E_TIMEOUT;
	if (rc)
		return ig_errprefix(eb, "%s (pid %ld) refused the handshake", p->program,
		                    (long)p->pid);
	if (rx.m.type != MSG_HELLO) {
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		             "%s (pid %ld) answered hello with '%s'; expected hello", p->program,
		             (long)p->pid, msg_type_name(rx.m.type));
	} else if (!msg_str_eq(rx.m.u.hello.role, p->role) ||
	           rx.m.u.hello.pid != (uint64_t)p->pid) {
		char role[MSG_ROLE_MAX + 1];

		msg_str_copy(role, sizeof(role), rx.m.u.hello.role);
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		             "the process answering at %s/%s.sock says it is '%s' pid %llu; "
		             "expected '%s' pid %ld (is another Ignis using this runtime "
		             "directory?)",
		             env->rtdir, p->sockname, role, (unsigned long long)rx.m.u.hello.pid,
		             p->role, (long)p->pid);
	}
	if (rc == IG_E_OK) {
		msg_str_copy(p->build, sizeof(p->build), rx.m.u.hello.build);
		rc = proc__greet(p, eb);
	}
	if (rc == IG_E_OK) {
		now = clk_mono_ms(); /* the caller's `now` may predate the spawn */
		p->state = PROC_RUNNING;
		p->ready_ms = now;
		p->ever_ready = true;
		p->next_ping_ms = now + PROC_PING_INTERVAL_MS;
		ev_begin(&e, EV_INFO, "ignis.supervisor.child_ready");
		ev_str(&e, "role", p->role);
		ev_u64(&e, "child_pid", (uint64_t)p->pid);
		ev_str(&e, "build", p->build);
		ev_u64(&e, "protocol", rx.m.version);
		ev_u64(&e, "startup_ms", now - p->spawned_ms);
		ev_end(&e);
	}
	tp_rx_release(&rx);
	return rc;
}

static void proc__ping(struct proc *p, uint64_t now)
{
	struct msg req = {.type = MSG_PING};
	struct ig_errbuf eb;
	struct tp_rx rx;
	struct ev e;
	int rc;

	p->next_ping_ms = now + PROC_PING_INTERVAL_MS;
	req.u.ping.seq = ++p->ping_seq;
	nng_socket_set_ms(p->req, NNG_OPT_RECVTIMEO, PROC_PING_TIMEOUT_MS);
	nng_socket_set_ms(p->req, NNG_OPT_SENDTIMEO, PROC_PING_TIMEOUT_MS);
	rc = tp_call(p->req, &req, &rx, &eb);
	if (rc == IG_E_OK && (rx.m.type != MSG_PONG || rx.m.u.pong.seq != req.u.ping.seq))
		rc = ig_errf(&eb, IG_E_PROTO_UNEXPECTED, "answered ping %llu with %s",
		             (unsigned long long)req.u.ping.seq, msg_type_name(rx.m.type));
	if (rc == IG_E_OK) {
		uint64_t away = rx.m.u.pong.loop_ms;

		if (away >= PROC_LOOP_STUCK_MS)
			rc = ig_errf(
			    &eb, IG_E_TIMEOUT,
			    "its loop has served nothing for %llu ms (a stuck step; at most "
			    "%u ms is taken for one)",
			    (unsigned long long)away, PROC_LOOP_STUCK_MS);
		else if (away >= PROC_LOOP_BUSY_MS && !p->busy_told) {
			p->busy_told = true;
			ev_begin(&e, EV_WARN, "ignis.supervisor.child_busy");
			ev_str(&e, "role", p->role);
			ev_u64(&e, "child_pid", (uint64_t)p->pid);
			ev_u64(&e, "loop_ms", away);
			ev_end(&e);
		} else if (away < PROC_LOOP_BUSY_MS)
			p->busy_told = false;
	}
	tp_rx_release(&rx);
	if (rc == IG_E_OK) {
		p->ping_misses = 0;
		return;
	}
	p->ping_misses++;
	ev_begin(&e, EV_WARN, "ignis.supervisor.child_ping_missed");
	ev_str(&e, "role", p->role);
	ev_u64(&e, "child_pid", (uint64_t)p->pid);
	ev_u64(&e, "missed", (uint64_t)p->ping_misses);
	ev_str(&e, "error", eb.msg);
	ev_end(&e);
	if (p->ping_misses >= PROC_PING_MISSES) {
		ev_begin(&e, EV_ERROR, "ignis.supervisor.child_unresponsive");
		ev_str(&e, "role", p->role);
		ev_u64(&e, "child_pid", (uint64_t)p->pid);
		ev_str(&e, "action", "SIGKILL");
		ev_end(&e);
		kill(p->pid, SIGKILL);
		p->ping_misses = 0;
	}
}

int proc_tick(struct proc *p, const struct proc_env *env, uint64_t now, struct ig_errbuf *eb)
{
	int rc;

	switch (p->state) {
	case PROC_STARTING:
		if (p->hello_killed)
			return IG_E_OK;
		if (now > p->spawned_ms && now - p->spawned_ms > PROC_HELLO_TIMEOUT_MS) {
			ev_msg(EV_ERROR, "ignis.supervisor.child_hello_timeout",
			       "%s (pid %ld) said no hello within %u ms; killing it", p->program,
			       (long)p->pid, PROC_HELLO_TIMEOUT_MS);
			kill(p->pid, SIGKILL);
			p->hello_killed = true; /* once: it is reaped on a later tick */
			return IG_E_OK;
		}
		rc = proc__hello(p, env, now, eb);
		if (rc == IG_E_OK || rc == IG_E_TIMEOUT)
			return IG_E_OK;
		/* A refused handshake will not get better by restarting: stop. */
		kill(p->pid, SIGTERM);
		p->state = PROC_FAILED;
		return rc;
	case PROC_RUNNING:
		if (now >= p->next_ping_ms)
			proc__ping(p, now);
		return IG_E_OK;
	case PROC_BACKOFF:
		if (now >= p->due_ms) {
			p->restarts++;
			rc = proc_spawn(p, env, eb);
			if (rc) {
				ev_msg(EV_ERROR, "ignis.supervisor.child_spawn_failed", "%s",
				       eb->msg);
				p->due_ms = now + PROC_BACKOFF_MAX_MS;
			}
		}
		return IG_E_OK;
	case PROC_IDLE:
	case PROC_FAILED:
		return IG_E_OK;
	}
	return IG_E_OK;
}

void proc_exited(struct proc *p, int status, uint64_t now, bool stopping)
{
	char how[96];
	struct ev e;
	uint32_t backoff;

	proc_describe_status(how, sizeof(how), status);
	ev_begin(&e, stopping ? EV_INFO : EV_WARN, "ignis.supervisor.child_exited");
	ev_str(&e, "role", p->role);
	ev_u64(&e, "child_pid", (uint64_t)p->pid);
	ev_str(&e, "status", how);
	if (WIFEXITED(status))
		ev_i64(&e, "exit_code", WEXITSTATUS(status));
	if (WIFSIGNALED(status))
		ev_i64(&e, "signal", WTERMSIG(status));
	ev_u64(&e, "uptime_ms", now - p->spawned_ms);
	ev_bool(&e, "expected", stopping);
	ev_end(&e);
	proc__close_req(p);
	p->pid = 0;
	if (stopping) {
		p->state = PROC_IDLE;
		return;
	}
	if (p->state == PROC_FAILED)
		return;
	if (!p->ever_ready) {
		if (p->hello_killed)
			snprintf(p->why_failed, sizeof(p->why_failed),
			         "said no hello within %u ms and was killed",
			         PROC_HELLO_TIMEOUT_MS);
		else
			snprintf(p->why_failed, sizeof(p->why_failed),
			         "exited (%s) before it said hello", how);
		p->state = PROC_FAILED;
		return;
	}
	if (p->ready_ms && now - p->ready_ms >= PROC_STABLE_MS)
		p->streak = 0;
	backoff = PROC_BACKOFF_MIN_MS << (p->streak < 7 ? p->streak : 7);
	if (backoff > PROC_BACKOFF_MAX_MS)
		backoff = PROC_BACKOFF_MAX_MS;
	p->streak++;
	p->due_ms = now + backoff;
	p->state = PROC_BACKOFF;
	ev_begin(&e, EV_WARN, "ignis.supervisor.child_restarting");
	ev_str(&e, "role", p->role);
	ev_u64(&e, "restart", p->restarts + 1);
	ev_u64(&e, "backoff_ms", backoff);
	ev_str(&e, "reason", how);
	ev_end(&e);
}

/* Wait up to `ms` for `p` to exit; true when it did (and was reported). */
static bool proc__wait(struct proc *p, uint64_t ms)
{
	uint64_t deadline = clk_mono_ms() + ms;

	for (;;) {
		int status;
		pid_t r = waitpid(p->pid, &status, WNOHANG);

		if (r == p->pid || (r < 0 && errno == ECHILD)) {
			proc_exited(p, r == p->pid ? status : 0, clk_mono_ms(), true);
			return true;
		}
		if (clk_mono_ms() >= deadline)
			return false;
		clk_sleep_ms(20);
	}
}

void proc_stop(struct proc *p, const struct proc_env *env)
{
	(void)env;
	if (p->pid <= 0) {
		p->state = PROC_IDLE;
		return;
	}
	if (p->state == PROC_RUNNING && p->req_open) {
		struct msg req = {.type = MSG_SHUTDOWN};
		struct ig_errbuf eb;
		struct tp_rx rx;

		req.u.shutdown.reason = msg_str_of("the supervisor is stopping");
		nng_socket_set_ms(p->req, NNG_OPT_RECVTIMEO, 1000);
		if (tp_call(p->req, &req, &rx, &eb) == IG_E_OK) {
			tp_rx_release(&rx);
			if (proc__wait(p, PROC_STOP_GRACE_MS))
				return;
		}
	}
	ev_msg(EV_WARN, "ignis.supervisor.child_terminating", "sending SIGTERM to %s (pid %ld)",
	       p->program, (long)p->pid);
	kill(-p->pid, SIGTERM);
	kill(p->pid, SIGTERM);
	if (proc__wait(p, PROC_TERM_GRACE_MS))
		return;
	ev_msg(EV_ERROR, "ignis.supervisor.child_killing", "sending SIGKILL to %s (pid %ld)",
	       p->program, (long)p->pid);
	kill(-p->pid, SIGKILL);
	kill(p->pid, SIGKILL);
	if (!proc__wait(p, PROC_TERM_GRACE_MS)) {
		/* Stuck in the kernel (a driver call, a dead NFS mount): give up on it.
		 * It still holds its lock, so its socket files are left alone. */
		ev_msg(EV_ERROR, "ignis.supervisor.child_unkillable",
		       "%s (pid %ld) survived SIGKILL for %u ms; leaving it", p->program,
		       (long)p->pid, PROC_TERM_GRACE_MS);
		p->pid = 0;
		p->state = PROC_IDLE;
	}
}
