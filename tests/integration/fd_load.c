/*
 * fd-load - many concurrent clients of the front door, each checked
 * against the same request run alone (through libignis-client).
 *
 *   fd-load SERVER CLIENTS MAX_TOKENS [fill]
 *
 * Eight requests (different prompts and seeds, half greedy, half sampled
 * with temperature 0.8, top_p 0.9, top_k 50, both classes) run first one at
 * a time: their tokens are the reference. Then CLIENTS threads, each with its
 * own connection, run request (thread % 8) at the same time and stream it
 * with 1 s waits. Every stream must be complete and equal, token for token,
 * to its reference; chunks must follow each other with no gap or overlap.
 * Prints one line per failure (the first 10) and a summary; exit 0 when all
 * passed, 1 otherwise.
 *
 * `fill` (CLIENTS above the worker's slots, --server-max-requests): once the server says a
 * submit waited for a slot (fd_stats slot_waits), every request is
 * cancelled as soon as its id is known (MAX_TOKENS long enough that the slots are
 * still running when the last clients come, however slowly they come). Then every client
 * must have been admitted (none refused), and every stream must be a prefix
 * of its reference (cancelled) or all of it.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ignis_client.h"

#define LOAD_SPECS 8

struct load_ref {
	char prompt[96];
	struct igc_params p;
	uint32_t *ids;
	size_t n;
};

struct load {
	const char *server;
	bool fill;
	uint64_t *ids; /* fill: each client's request id once admitted */
	uint32_t max_tokens;
	struct load_ref ref[LOAD_SPECS];
	pthread_mutex_t mu;
	unsigned failures, passed, finished;
	uint64_t tokens, max_queued_ms;
	uint64_t slot_waits0; /* fill: the server's count before the clients */
};

struct load_job {
	struct load *l;
	unsigned no;
};

static void load_fail(struct load *l, unsigned no, const char *what)
{
	pthread_mutex_lock(&l->mu);
	if (l->failures++ < 10)
		fprintf(stderr, "fd-load: client %u: %s\n", no, what);
	pthread_mutex_unlock(&l->mu);
}

/* Run one request to its end; its tokens into *ids (malloc'd), *n. */
static int load_run(struct load *l, unsigned no, const struct igc_params *p, uint32_t **ids,
                    size_t *n, uint64_t *queued_ms)
{
	struct igc_client *c = NULL;
	struct igc_submitted sub;
	struct igc_stream *s = NULL;
	struct igc_error err;
	size_t cap = (size_t)l->max_tokens + 1;
	char what[700];
	int rc;

	*n = 0;
	*ids = malloc(cap * sizeof(uint32_t));
	rc = igc_connect(&c, l->server, NULL, &err);
	if (!rc)
		rc = igc_submit(c, p, &sub, &err);
	if (!rc && l->fill && no < 1000) {
		pthread_mutex_lock(&l->mu);
		l->ids[no] = sub.id;
		pthread_mutex_unlock(&l->mu);
	}
	if (!rc)
		rc = igc_stream_open(c, sub.id, &s, &err);
	while (!rc) {
		struct igc_chunk ch;

		rc = igc_stream_next(s, 1000, &ch, &err);
		if (rc)
			break;
		if (ch.from != *n) {
			snprintf(what, sizeof(what), "chunk from %u after %zu tokens", ch.from, *n);
			load_fail(l, no, what);
			rc = -1;
			break;
		}
		if (*n + ch.n > cap) {
			load_fail(l, no, "more tokens than max_tokens");
			rc = -1;
			break;
		}
		memcpy(*ids + *n, ch.ids, ch.n * sizeof(uint32_t));
		*n += ch.n;
		if (ch.done) {
			if (ch.generated != *n) {
				snprintf(what, sizeof(what), "done with %u generated, %zu received",
				         ch.generated, *n);
				load_fail(l, no, what);
				rc = -1;
			}
			*queued_ms = sub.queued_ms;
			break;
		}
	}
	if (rc > 0) {
		snprintf(what, sizeof(what), "%s: %s", igc_code_name(rc), err.message);
		load_fail(l, no, what);
	}
	igc_stream_close(s);
	igc_close(c);
	return rc;
}

static void *load_client(void *arg)
{
	struct load_job *j = arg;
	struct load *l = j->l;
	const struct load_ref *ref = &l->ref[j->no % LOAD_SPECS];
	uint64_t queued = 0;
	uint32_t *ids;
	size_t n;

	if (load_run(l, j->no, &ref->p, &ids, &n, &queued) == 0) {
		bool prefix = l->fill && n <= ref->n;

		if ((n != ref->n && !prefix) || memcmp(ids, ref->ids, n * sizeof(uint32_t))) {
			char what[128];
			size_t k = 0;

			while (k < n && k < ref->n && ids[k] == ref->ids[k])
				k++;
			snprintf(what, sizeof(what),
			         "request %u: %zu tokens, alone %zu; first difference at %zu",
			         j->no % LOAD_SPECS, n, ref->n, k);
			load_fail(l, j->no, what);
		} else {
			pthread_mutex_lock(&l->mu);
			l->passed++;
			l->tokens += n;
			if (queued > l->max_queued_ms)
				l->max_queued_ms = queued;
			pthread_mutex_unlock(&l->mu);
		}
	}
	free(ids);
	pthread_mutex_lock(&l->mu);
	l->finished++;
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* Wait until a submit waited for a worker slot, then cancel every request
 * as soon as it is admitted, until all clients are done. */
static int load_fill(struct load *l, unsigned clients)
{
	struct igc_stats *st = malloc(sizeof(*st));
	struct igc_client *c;
	struct igc_error err;
	bool *cancelled = calloc(clients, sizeof(bool));
	unsigned done = 0;

	if (!st || !cancelled || igc_connect(&c, l->server, NULL, &err)) {
		fprintf(stderr, "fd-load: cannot watch the server\n");
		return 1;
	}
	for (int tries = 0;; tries++) {
		if (igc_stats(c, st, &err)) {
			fprintf(stderr, "fd-load: stats: %s\n", err.message);
			return 1;
		}
		if (st->slot_waits > l->slot_waits0)
			break;
		if (tries > 600) {
			fprintf(stderr,
			        "fd-load: no submit waited for a worker slot in 60 s (%u running, "
			        "%u queued, %u of %u clients done)\n",
			        st->live, st->queued, l->finished, clients);
			return 1;
		}
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	printf("fd-load: %u running, %u waiting for a worker slot; cancelling\n", st->live,
	       st->queued);
	while (done < clients) {
		for (unsigned i = 0; i < clients; i++) {
			uint64_t id;

			pthread_mutex_lock(&l->mu);
			id = l->ids[i];
			pthread_mutex_unlock(&l->mu);
			if (id && !cancelled[i]) {
				igc_cancel(c, id, NULL);
				cancelled[i] = true;
			}
		}
		nanosleep(&(struct timespec){0, 20000000L}, NULL);
		pthread_mutex_lock(&l->mu);
		done = l->finished;
		pthread_mutex_unlock(&l->mu);
	}
	igc_close(c);
	free(st);
	free(cancelled);
	return 0;
}

static double load_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static struct load l;
	struct load_job *jobs;
	pthread_t *th;
	unsigned clients;
	double t0;

	if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "fill"))) {
		fprintf(stderr, "usage: fd-load SERVER CLIENTS MAX_TOKENS [fill]\n");
		return 2;
	}
	l.fill = argc == 5;
	l.server = argv[1];
	clients = (unsigned)strtoul(argv[2], NULL, 10);
	l.max_tokens = (uint32_t)strtoul(argv[3], NULL, 10);
	pthread_mutex_init(&l.mu, NULL);
	for (unsigned i = 0; i < LOAD_SPECS; i++) {
		struct load_ref *r = &l.ref[i];
		uint64_t q;

		snprintf(r->prompt, sizeof(r->prompt), "load %u: the quick brown fox, %u times", i,
		         i * 7 + 1);
		igc_params_init(&r->p);
		r->p.text = r->prompt;
		r->p.max_tokens = l.max_tokens;
		r->p.seed = 100 + i;
		r->p.cls = i % 3 == 2 ? "agent" : "interactive";
		if (i % 2) {
			r->p.temperature = 0.8;
			r->p.top_p = 0.9;
			r->p.top_k = 50;
		}
		if (load_run(&l, 1000 + i, &r->p, &r->ids, &r->n, &q)) {
			fprintf(stderr, "fd-load: request %u alone failed\n", i);
			return 1;
		}
	}
	l.ids = calloc(clients, sizeof(*l.ids));
	if (l.fill) {
		struct igc_stats *st = malloc(sizeof(*st));
		struct igc_client *c;
		struct igc_error err;

		if (!st || igc_connect(&c, l.server, NULL, &err) || igc_stats(c, st, &err)) {
			fprintf(stderr, "fd-load: cannot read the server's figures\n");
			return 1;
		}
		l.slot_waits0 = st->slot_waits;
		igc_close(c);
		free(st);
	}
	jobs = calloc(clients, sizeof(*jobs));
	th = calloc(clients, sizeof(*th));
	t0 = load_now();
	for (unsigned i = 0; i < clients; i++) {
		jobs[i] = (struct load_job){&l, i};
		if (pthread_create(&th[i], NULL, load_client, &jobs[i]) != 0) {
			fprintf(stderr, "fd-load: cannot start client thread %u\n", i);
			return 1;
		}
	}
	if (l.fill && load_fill(&l, clients))
		return 1;
	for (unsigned i = 0; i < clients; i++)
		pthread_join(th[i], NULL);
	free(jobs);
	free(th);
	free(l.ids);
	for (unsigned i = 0; i < LOAD_SPECS; i++)
		free(l.ref[i].ids);
	printf("fd-load: %u clients, %u identical to the request alone, %u failed; %" PRIu64
	       " tokens in %.2f s; longest wait for a worker slot %" PRIu64 " ms\n",
	       clients, l.passed, l.failures, l.tokens, load_now() - t0, l.max_queued_ms);
	return l.failures || l.passed != clients ? 1 : 0;
}
