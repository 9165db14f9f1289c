/*
 * ctl.c - `ignis-supervisor status` and `ignis-supervisor stop`: clients of a
 * running supervisor's control socket.
 *
 * Whether a supervisor runs is asked of its lock (supervisor.lock, held for
 * its whole life), never by poking the socket: a stale socket file from a
 * supervisor killed with -9 must read as "none runs", not hang.
 */
#include "sup.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/event.h"
#include "plan.h" /* PLAN_EXIT_CONFIG */
#include "common/rtdir.h"
#include "proto/transport.h"

static int ctl__connect(const struct sup_opts *o, char *rtdir, nng_socket *s, pid_t *holder_out)
{
	struct ig_errbuf eb;
	pid_t holder;
	int rc;

	rc = sup_rtdir(o, rtdir, RTDIR_PATH_MAX + 1, &eb);
	if (rc) {
		/* a configuration error, as in start and plan */
		fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
		return PLAN_EXIT_CONFIG;
	}
	{
		char sock[RTDIR_PATH_MAX + 32], lock[RTDIR_PATH_MAX + 32];

		snprintf(sock, sizeof(sock), "%s/supervisor.sock", rtdir);
		snprintf(lock, sizeof(lock), "%s/supervisor.lock", rtdir);
		/* no supervisor there, or not ours to talk to: said now, and why */
		if (tp_reach(sock, lock, "ignis-supervisor", &eb)) {
			fprintf(stderr, "ignis-supervisor: %s\n", eb.msg);
			return 1;
		}
		tp_lock_held(rtdir, "supervisor", &holder);
	}
	rc = tp_dial(s, rtdir, "supervisor", 3000, &eb);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: cannot reach the supervisor (pid %ld): %s\n",
		        (long)holder, eb.msg);
		return 1;
	}
	if (holder_out)
		*holder_out = holder;
	return 0;
}

static void ctl__json_str(const char *key, struct msg_str v, bool comma)
{
	char buf[1024];
	size_t n = ev_json_escape(buf, sizeof(buf), v.p, v.n);

	printf("\"%s\":\"%.*s\"%s", key, (int)(n == (size_t)-1 ? 0 : n), buf, comma ? "," : "");
}

int sup_status(const struct sup_opts *o)
{
	char rtdir[RTDIR_PATH_MAX + 1];
	struct msg req = {.type = MSG_STATUS};
	struct ig_errbuf eb;
	struct tp_rx rx;
	nng_socket s;
	int rc;

	rc = ctl__connect(o, rtdir, &s, NULL);
	if (rc)
		return rc;
	req.u.status.seq = clk_mono_ms();
	rc = tp_call(s, &req, &rx, &eb);
	if (rc == IG_E_OK && rx.m.type != MSG_STATUS_REPLY)
		rc = ig_errf(&eb, IG_E_PROTO_UNEXPECTED, "answered status with '%s'",
		             msg_type_name(rx.m.type));
	if (rc) {
		fprintf(stderr, "ignis-supervisor: the supervisor at %s did not answer: %s\n",
		        rtdir, eb.msg);
		tp_rx_release(&rx);
		nng_close(s);
		return 1;
	}
	if (o->json) {
		printf("{");
		ctl__json_str("runtime_dir", msg_str_of(rtdir), true);
		printf("\"procs\":[");
		for (uint32_t i = 0; i < rx.m.u.status_reply.procs.n; i++) {
			const struct msg_proc *p = &rx.m.u.status_reply.procs.v[i];

			printf("%s{", i ? "," : "");
			ctl__json_str("role", p->role, true);
			printf("\"pid\":%llu,", (unsigned long long)p->pid);
			ctl__json_str("state", p->state, true);
			printf("\"uptime_ms\":%llu,\"restarts\":%llu}",
			       (unsigned long long)p->uptime_ms, (unsigned long long)p->restarts);
		}
		printf("]}\n");
	} else {
		printf("runtime directory: %s\n", rtdir);
		printf("%-12s %8s  %-11s %9s %9s\n", "ROLE", "PID", "STATE", "UPTIME", "RESTARTS");
		for (uint32_t i = 0; i < rx.m.u.status_reply.procs.n; i++) {
			const struct msg_proc *p = &rx.m.u.status_reply.procs.v[i];
			char up[32];

			clk_fmt_duration(up, sizeof(up), p->uptime_ms);
			printf("%-12.*s %8llu  %-11.*s %9s %9llu\n", (int)p->role.n, p->role.p,
			       (unsigned long long)p->pid, (int)p->state.n, p->state.p,
			       p->pid ? up : "-", (unsigned long long)p->restarts);
		}
	}
	tp_rx_release(&rx);
	nng_close(s);
	return 0;
}

int sup_stop(const struct sup_opts *o)
{
	char rtdir[RTDIR_PATH_MAX + 1];
	struct msg req = {.type = MSG_SHUTDOWN};
	struct ig_errbuf eb;
	struct tp_rx rx;
	uint64_t deadline;
	pid_t holder, asked;
	nng_socket s;
	int rc;

	rc = ctl__connect(o, rtdir, &s, &asked);
	if (rc)
		return rc;
	req.u.shutdown.reason = msg_str_of("ignis-supervisor stop");
	rc = tp_call(s, &req, &rx, &eb);
	if (rc == IG_E_OK && (rx.m.type != MSG_ACK || rx.m.u.ack.of != MSG_SHUTDOWN))
		rc = ig_errf(&eb, IG_E_PROTO_UNEXPECTED, "answered shutdown with '%s'",
		             msg_type_name(rx.m.type));
	tp_rx_release(&rx);
	nng_close(s);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: the supervisor at %s refused to stop: %s\n",
		        rtdir, eb.msg);
		return 1;
	}
	/* Its lock goes when it has stopped both daemons and closed its socket. */
	deadline = clk_mono_ms() + 30000;
	/* (A new supervisor may take the lock at once: only ours counts.) */
	while (tp_lock_held(rtdir, "supervisor", &holder) && holder == asked) {
		if (clk_mono_ms() > deadline) {
			fprintf(stderr,
			        "ignis-supervisor: the supervisor (pid %ld) accepted the stop but "
			        "still runs after 30 s\n",
			        (long)holder);
			return 1;
		}
		clk_sleep_ms(50);
	}
	fprintf(stderr, "ignis-supervisor: stopped the supervisor at %s\n", rtdir);
	return 0;
}

int sup_restart(const struct sup_opts *o, const char *role)
{
	char rtdir[RTDIR_PATH_MAX + 1];
	struct msg req = {.type = MSG_RESTART};
	struct ig_errbuf eb;
	struct tp_rx rx;
	pid_t asked;
	nng_socket s;
	int rc;

	rc = ctl__connect(o, rtdir, &s, &asked);
	if (rc)
		return rc;
	/* an orderly stop may take the child's whole grace */
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 30000);
	req.u.restart.role = msg_str_of(role);
	rc = tp_call(s, &req, &rx, &eb);
	if (rc == IG_E_OK && (rx.m.type != MSG_ACK || rx.m.u.ack.of != MSG_RESTART))
		rc = ig_errf(&eb, IG_E_PROTO_UNEXPECTED, "answered restart with '%s'",
		             msg_type_name(rx.m.type));
	tp_rx_release(&rx);
	nng_close(s);
	if (rc) {
		fprintf(stderr, "ignis-supervisor: restart %s: %s\n", role, eb.msg);
		return 1;
	}
	printf("ignis-supervisor: restarted %s at %s\n", role, rtdir);
	return 0;
}
