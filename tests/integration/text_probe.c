/*
 * text-probe - a test client that follows one request a few tokens at a
 * time and prints every reply as the server sent it: the ids and the text.
 *
 *   text-probe worker RTDIR [options]   submit and poll on RTDIR/gpu-worker.sock
 *   text-probe door URL [options]       fd_submit and fd_poll on the front door
 *
 *   --prompt TEXT      the prompt (default "hello")
 *   --max-tokens N     the cap (default 64)
 *   --seed S, --temperature T
 *   --stop S           a stop string (up to 8)
 *   --poll-max M       the most tokens a poll asks (default 1: token by token)
 *
 * One JSON line a reply that brought tokens or text, or ended the request:
 *   {"from":F,"ids":[...],"text":"HEX","done":true,"finish":"eos","generated":G}
 * with the reply's text in hex (it may hold any character). Exit 0 when the
 * request ran to its end, 1 on a refusal or a transport failure (the
 * message on stderr), 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/transport.h"

struct probe {
	bool door;
	const char *where, *prompt;
	uint64_t max_tokens, seed, poll_max;
	double temperature;
	const char *stops[MSG_STOP_MAX];
	uint32_t nstop;
};

static int usage(void)
{
	fprintf(stderr, "usage: text-probe worker RTDIR|door URL [--prompt TEXT] [--max-tokens N] "
	                "[--seed S] [--temperature T] [--stop S]... [--poll-max M]\n");
	return 2;
}

static int probe_args(struct probe *p, int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "worker") && strcmp(argv[1], "door")))
		return usage();
	*p = (struct probe){.door = !strcmp(argv[1], "door"),
	                    .where = argv[2],
	                    .prompt = "hello",
	                    .max_tokens = 64,
	                    .poll_max = 1};
	for (int i = 3; i < argc; i += 2) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			return usage();
		if (!strcmp(o, "--prompt"))
			p->prompt = v;
		else if (!strcmp(o, "--max-tokens"))
			p->max_tokens = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--seed"))
			p->seed = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--temperature"))
			p->temperature = strtod(v, NULL);
		else if (!strcmp(o, "--poll-max"))
			p->poll_max = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--stop") && p->nstop < MSG_STOP_MAX)
			p->stops[p->nstop++] = v;
		else
			return usage();
	}
	return p->poll_max >= 1 && p->poll_max <= MSG_IDS_MAX ? 0 : usage();
}

static void print_reply(uint64_t from, const uint32_t *ids, uint32_t n, struct msg_str text,
                        bool done, struct msg_str finish, uint64_t generated)
{
	printf("{\"from\":%llu,\"ids\":[", (unsigned long long)from);
	for (uint32_t i = 0; i < n; i++)
		printf("%s%u", i ? "," : "", ids[i]);
	printf("],\"text\":\"");
	for (uint32_t i = 0; i < text.n; i++)
		printf("%02x", (unsigned char)text.p[i]);
	printf("\",\"done\":%s,\"finish\":\"%.*s\",\"generated\":%llu}\n", done ? "true" : "false",
	       (int)finish.n, finish.p, (unsigned long long)generated);
}

/* Send `q`, take the answer of type `want`; 0, or 1 with the reason said. */
static int call(nng_socket s, const struct msg *q, struct tp_rx *rx, uint32_t want)
{
	struct ig_errbuf eb;

	if (tp_call(s, q, rx, &eb)) {
		fprintf(stderr, "text-probe: %s\n", eb.msg);
		return 1;
	}
	if (rx->m.type != want) {
		if (rx->m.type == MSG_ERROR)
			fprintf(stderr, "text-probe: %s: %.*s\n",
			        ig_err_name((int)rx->m.u.error.code), (int)rx->m.u.error.message.n,
			        rx->m.u.error.message.p);
		else
			fprintf(stderr, "text-probe: answered '%s'\n", msg_type_name(rx->m.type));
		tp_rx_release(rx);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct msg q;
	struct probe p = {0};
	struct ig_errbuf eb;
	struct tp_rx rx;
	nng_socket s;
	uint64_t id, from = 0;
	int rc = probe_args(&p, argc, argv);

	if (rc)
		return rc;
	if (p.door ? tp_dial_url(&s, p.where, 5000, &eb)
	           : tp_dial(&s, p.where, "gpu-worker", 5000, &eb)) {
		fprintf(stderr, "text-probe: %s\n", eb.msg);
		return 1;
	}
	memset(&q, 0, sizeof(q));
	if (p.door) {
		struct msg_fd_submit *f = &q.u.fd_submit;

		q.type = MSG_FD_SUBMIT;
		f->text = msg_str_of(p.prompt);
		f->max_tokens = p.max_tokens;
		f->class = msg_str_of("interactive");
		f->temperature = p.temperature;
		f->top_p = 1.0;
		f->seed = p.seed;
		f->stop.n = p.nstop;
		for (uint32_t i = 0; i < p.nstop; i++)
			f->stop.v[i].text = msg_str_of(p.stops[i]);
	} else {
		struct msg_submit *f = &q.u.submit;

		q.type = MSG_SUBMIT;
		f->text = msg_str_of(p.prompt);
		f->max_tokens = p.max_tokens;
		f->class = msg_str_of("interactive");
		f->temperature = p.temperature;
		f->top_p = 1.0;
		f->seed = p.seed;
		f->stop.n = p.nstop;
		for (uint32_t i = 0; i < p.nstop; i++)
			f->stop.v[i].text = msg_str_of(p.stops[i]);
	}
	if (call(s, &q, &rx, p.door ? MSG_FD_SUBMITTED : MSG_SUBMITTED)) {
		nng_close(s);
		return 1;
	}
	id = p.door ? rx.m.u.fd_submitted.id : rx.m.u.submitted.id;
	tp_rx_release(&rx);
	for (bool done = false; !done;) {
		uint32_t n;

		memset(&q, 0, sizeof(q));
		if (p.door) {
			q.type = MSG_FD_POLL;
			q.u.fd_poll = (struct msg_fd_poll){id, from, p.poll_max, 1000};
		} else {
			q.type = MSG_POLL;
			q.u.poll = (struct msg_poll){id, from, p.poll_max};
		}
		if (call(s, &q, &rx, p.door ? MSG_FD_TOKENS : MSG_TOKENS)) {
			nng_close(s);
			return 1;
		}
		if (p.door) {
			const struct msg_fd_tokens *t = &rx.m.u.fd_tokens;

			n = t->tokens.n;
			done = t->done && from + n == t->generated;
			if (n || t->text.n || done)
				print_reply(from, t->tokens.v, n, t->text, t->done, t->finish,
				            t->generated);
		} else {
			const struct msg_tokens *t = &rx.m.u.tokens;

			n = t->tokens.n;
			done = t->done && from + n == t->generated;
			if (n || t->text.n || done)
				print_reply(from, t->tokens.v, n, t->text, t->done, t->finish,
				            t->generated);
		}
		from += n;
		tp_rx_release(&rx);
		if (!n && !done && !p.door)
			usleep(2000);
	}
	fflush(stdout);
	/* forget it */
	memset(&q, 0, sizeof(q));
	q.type = p.door ? MSG_FD_CANCEL : MSG_CANCEL;
	if (p.door)
		q.u.fd_cancel.id = id;
	else
		q.u.cancel.id = id;
	if (tp_call(s, &q, &rx, &eb) == IG_E_OK)
		tp_rx_release(&rx);
	nng_close(s);
	return 0;
}
