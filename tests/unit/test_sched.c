/*
 * test_sched.c - the round planner's rules (roundplan.h), each as a table: a
 * snapshot of sequences, the free pages and the lanes, and the round that
 * must come out (admissions, lane grants, decodes, prefill chunks in rank
 * order).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gpu-worker/engine/roundplan.h"

#define I  SCHED_INTERACTIVE
#define A  SCHED_AGENT
#define W  SCHED_WAITING
#define P  SCHED_PREFILL
#define R  SCHED_READY
#define D  SCHED_DECODE
#define X  SCHED_DONE
#define MO SCHED_MOVING_OUT
#define MV SCHED_MOVED
#define MI SCHED_MOVING_IN

#define MAXN 8

struct row {
	const char *what;
	uint32_t lanes, slots, chunk, free_pages, n;
	struct sched_seq seqs[MAXN];
	/* expected, as snapshot indices; -1 ends a list */
	int admit[MAXN], grant[MAXN], decode[MAXN];
	struct {
		int seq;
		uint32_t from, n;
	} prefill[MAXN];
	uint32_t tokens;
	uint64_t pages_after;
	uint32_t slots_after;
};

/* id, class, arrival, prompt, pages, prefilled, phase */
#define S(cls, arr, prompt, pages, done, ph)                                                       \
	{                                                                                          \
		(arr), (cls), (arr), (prompt), (pages), (done), (ph), false, 0, false                   \
	}
#define NONE                                                                                       \
	{                                                                                          \
		-1                                                                                 \
	}

/* Slots are the lanes (the engine's) but where a row says otherwise: a
 * ready sequence waiting for a lane needs more slots than lanes. */
static const struct row rows[] = {
    {"nothing live: nothing to do",
     2,
     2,
     16,
     10,
     1,
     {S(I, 1, 10, 1, 10, X)},
     NONE,
     NONE,
     NONE,
     {{-1, 0, 0}},
     0,
     10,
     2},
    {"a waiting request is admitted and prefills its first chunk",
     2,
     2,
     16,
     10,
     1,
     {S(A, 1, 40, 2, 0, W)},
     {0, -1},
     NONE,
     NONE,
     {{0, 0, 16}, {-1, 0, 0}},
     16,
     8,
     1},
    {"rank: interactive before an earlier agent",
     2,
     2,
     64,
     3,
     2,
     {S(A, 1, 10, 2, 0, W), S(I, 2, 10, 2, 0, W)},
     {1, -1},
     NONE,
     NONE,
     {{1, 0, 10}, {-1, 0, 0}},
     10,
     1,
     1},
    {"rank: among agents, the earlier first",
     2,
     2,
     64,
     2,
     2,
     {S(A, 7, 10, 2, 0, W), S(A, 3, 10, 2, 0, W)},
     {1, -1},
     NONE,
     NONE,
     {{1, 0, 10}, {-1, 0, 0}},
     10,
     0,
     1},
    {"admission is strict: a smaller request ranked below does not pass one that "
     "waits",
     2,
     2,
     64,
     3,
     2,
     {S(I, 1, 10, 4, 0, W), S(A, 2, 10, 1, 0, W)},
     NONE,
     NONE,
     NONE,
     {{-1, 0, 0}},
     0,
     3,
     2},
    {"all or nothing: exactly the free pages admit; one page short does not",
     4,
     4,
     64,
     5,
     3,
     {S(I, 1, 5, 2, 0, W), S(I, 2, 5, 3, 0, W), S(I, 3, 5, 1, 0, W)},
     {0, 1, -1},
     NONE,
     NONE,
     {{0, 0, 5}, {1, 0, 5}, {-1, 0, 0}},
     10,
     0,
     2},
    {"the prefill budget goes in rank order, the highest takes what it needs",
     4,
     4,
     20,
     0,
     3,
     {S(A, 1, 30, 1, 4, P), S(I, 2, 12, 1, 5, P), S(I, 3, 50, 1, 0, P)},
     NONE,
     NONE,
     NONE,
     {{1, 5, 7}, {2, 0, 13}, {-1, 0, 0}},
     20,
     0,
     1},
    {"ready sequences take free lanes in rank order; lane holders decode (slots above lanes)",
     2,
     4,
     8,
     0,
     4,
     {S(A, 1, 4, 1, 4, D), S(A, 2, 4, 1, 4, R), S(I, 3, 4, 1, 4, R), S(A, 4, 4, 1, 4, R)},
     NONE,
     {2, -1},
     {2, 0, -1},
     {{-1, 0, 0}},
     2,
     0,
     0},
    {"a lane holder keeps its lane: an interactive ready one waits for a free lane (slots above "
     "lanes)",
     1,
     2,
     8,
     0,
     2,
     {S(A, 1, 4, 1, 4, D), S(I, 2, 4, 1, 4, R)},
     NONE,
     NONE,
     {0, -1},
     {{-1, 0, 0}},
     1,
     0,
     0},
    {"a finished sequence holds no lane: the ready one takes it",
     1,
     1,
     8,
     4,
     2,
     {S(A, 1, 4, 1, 4, X), S(I, 2, 4, 1, 4, R)},
     NONE,
     {1, -1},
     {1, -1},
     {{-1, 0, 0}},
     1,
     4,
     0},
    {"slots == lanes: a ready sequence takes a lane at once",
     2,
     2,
     8,
     0,
     2,
     {S(A, 1, 4, 1, 4, D), S(A, 2, 4, 1, 4, R)},
     NONE,
     {1, -1},
     {0, 1, -1},
     {{-1, 0, 0}},
     2,
     0,
     0},
    {"decode and prefill share a round",
     3,
     3,
     8,
     1,
     3,
     {S(I, 1, 4, 1, 4, D), S(A, 2, 30, 1, 0, W), S(I, 3, 9, 1, 3, P)},
     {1, -1},
     NONE,
     {0, -1},
     {{2, 3, 6}, {1, 0, 2}, {-1, 0, 0}},
     9,
     0,
     0},
    {"a request of zero prompt left is ready at admission and takes a lane",
     2,
     2,
     8,
     2,
     1,
     {S(I, 1, 5, 1, 5, W)},
     {0, -1},
     {0, -1},
     {0, -1},
     {{-1, 0, 0}},
     1,
     1,
     1},
    /* state slots (ADR 0027) */
    {"every slot taken: a waiting request waits though its pages are free",
     2,
     2,
     8,
     5,
     3,
     {S(A, 1, 4, 1, 4, D), S(A, 2, 4, 1, 4, D), S(I, 3, 4, 1, 0, W)},
     NONE,
     NONE,
     {0, 1, -1},
     {{-1, 0, 0}},
     2,
     5,
     0},
    {"a prefilling sequence holds its slot",
     2,
     2,
     8,
     5,
     3,
     {S(A, 1, 4, 1, 4, D), S(A, 2, 30, 1, 4, P), S(I, 3, 4, 1, 0, W)},
     NONE,
     NONE,
     {0, -1},
     {{1, 4, 8}, {-1, 0, 0}},
     9,
     5,
     0},
    {"the last slot goes in rank order: an earlier agent waits for an interactive",
     1,
     1,
     8,
     5,
     2,
     {S(A, 1, 4, 1, 0, W), S(I, 2, 4, 1, 0, W)},
     {1, -1},
     NONE,
     NONE,
     {{1, 0, 4}, {-1, 0, 0}},
     4,
     4,
     0},
    {"admission stops at the first that lacks a slot: none below passes it",
     2,
     2,
     8,
     5,
     4,
     {S(I, 1, 4, 1, 4, D), S(I, 2, 4, 1, 0, W), S(I, 3, 4, 1, 0, W), S(A, 4, 4, 1, 0, W)},
     {1, -1},
     NONE,
     {0, -1},
     {{1, 0, 4}, {-1, 0, 0}},
     5,
     4,
     0},
    {"moving sequences hold their slots; a moved one holds none",
     3,
     3,
     8,
     5,
     4,
     {S(A, 1, 4, 1, 4, MO), S(A, 2, 4, 1, 4, MI), S(A, 3, 4, 1, 4, MV), S(I, 4, 4, 1, 0, W)},
     {3, -1},
     NONE,
     NONE,
     {{3, 0, 4}, {-1, 0, 0}},
     4,
     4,
     0},
    {"a moved one ranked above takes the last slot before a newcomer (restored, no tokens)",
     2,
     2,
     8,
     5,
     3,
     {S(I, 1, 4, 1, 4, D), S(I, 2, 4, 1, 4, MV), S(I, 3, 4, 1, 0, W)},
     NONE,
     NONE,
     {0, -1},
     {{-1, 0, 0}},
     1,
     4,
     0},
};

static void check_list(const char *what, const char *name, const int *want, const uint32_t *got,
                       uint32_t n_got)
{
	uint32_t n = 0;

	while (n < MAXN && want[n] >= 0)
		n++;
	if (n != n_got)
		fail_msg("%s: %s has %u entries, expected %u", what, name, n_got, n);
	for (uint32_t i = 0; i < n; i++)
		if ((uint32_t)want[i] != got[i])
			fail_msg("%s: %s[%u] = %u, expected %d", what, name, i, got[i], want[i]);
}

static void test_rules(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		const struct row *rw = &rows[k];
		uint32_t admit[MAXN], grant[MAXN], decode[MAXN], order[MAXN], n = 0;
		uint32_t restore[MAXN], victims[MAXN];
		struct sched_chunk chunks[MAXN];
		struct sched_round r = {.admit = admit,
		                        .grant = grant,
		                        .decode = decode,
		                        .prefill = chunks,
		                        .restore = restore,
		                        .victims = victims};
		struct sched_cfg cfg = {.lanes = rw->lanes, .slots = rw->slots, .chunk = rw->chunk};
		uint32_t tokens = sched_plan(&cfg, rw->seqs, rw->n, rw->free_pages, order, &r);

		check_list(rw->what, "admit", rw->admit, r.admit, r.n_admit);
		check_list(rw->what, "grant", rw->grant, r.grant, r.n_grant);
		check_list(rw->what, "decode", rw->decode, r.decode, r.n_decode);
		while (n < MAXN && rw->prefill[n].seq >= 0)
			n++;
		if (n != r.n_prefill)
			fail_msg("%s: %u prefill chunks, expected %u", rw->what, r.n_prefill, n);
		for (uint32_t i = 0; i < n; i++)
			if (chunks[i].seq != (uint32_t)rw->prefill[i].seq ||
			    chunks[i].from != rw->prefill[i].from ||
			    chunks[i].n != rw->prefill[i].n)
				fail_msg(
				    "%s: chunk %u is seq %u [%u, +%u), expected seq %d [%u, +%u)",
				    rw->what, i, chunks[i].seq, chunks[i].from, chunks[i].n,
				    rw->prefill[i].seq, rw->prefill[i].from, rw->prefill[i].n);
		if (tokens != rw->tokens || r.pages_after != rw->pages_after ||
		    r.slots_after != rw->slots_after)
			fail_msg("%s: %u tokens, %llu pages and %u slots after, expected %u, %llu "
			         "and %u",
			         rw->what, tokens, (unsigned long long)r.pages_after, r.slots_after,
			         rw->tokens, (unsigned long long)rw->pages_after, rw->slots_after);
	}
}

/* The rank order never depends on the snapshot's order. */
static void test_rank_is_a_total_order(void **state)
{
	struct sched_seq s[6] = {
	    S(A, 5, 1, 1, 0, W), S(I, 9, 1, 1, 0, W), S(A, 2, 1, 1, 0, W),
	    S(I, 4, 1, 1, 0, W), S(I, 1, 1, 1, 0, X), S(A, 7, 1, 1, 0, W),
	};
	static const uint64_t want[5] = {4, 9, 2, 5, 7};
	uint32_t admit[6], grant[6], decode[6], order[6], restore[6], victims[6];
	struct sched_chunk chunks[6];
	struct sched_round r = {.admit = admit,
	                        .grant = grant,
	                        .decode = decode,
	                        .prefill = chunks,
	                        .restore = restore,
	                        .victims = victims};
	struct sched_cfg cfg = {.lanes = 1, .slots = MAXN, .chunk = 64};

	(void)state;
	for (int rot = 0; rot < 6; rot++) {
		struct sched_seq t = s[0];

		memmove(s, s + 1, 5 * sizeof(s[0]));
		s[5] = t;
		cfg.slots = MAXN;
		sched_plan(&cfg, s, 6, 100, order, &r);
		assert_int_equal(r.n_admit, 5);
		for (int i = 0; i < 5; i++)
			assert_int_equal(s[admit[i]].id, want[i]);
		/* three slots: the first three in rank order */
		cfg.slots = 3;
		sched_plan(&cfg, s, 6, 100, order, &r);
		assert_int_equal(r.n_admit, 3);
		for (int i = 0; i < 3; i++)
			assert_int_equal(s[admit[i]].id, want[i]);
	}
	assert_string_equal(sched_phase_name(SCHED_READY), "ready");
	assert_string_equal(sched_class_name(SCHED_AGENT), "agent");
}

/* Rows of logits (docs/adr/0063): the chunks of rows_each sequences take
 * at most cfg.rows tokens in all, in rank order; one left without waits
 * while those after it still prefill; the others' chunks are not cut. */
static void test_rows(void **state)
{
	struct sched_seq s[4] = {
	    S(I, 1, 100, 2, 0, P), S(I, 2, 50, 1, 0, P), S(I, 3, 30, 1, 0, P), S(I, 4, 40, 1, 0, P)};
	uint32_t admit[4], grant[4], decode[4], order[4], restore[4], victims[4];
	struct sched_chunk chunks[4];
	struct sched_round r = {.admit = admit,
	                        .grant = grant,
	                        .decode = decode,
	                        .prefill = chunks,
	                        .restore = restore,
	                        .victims = victims};
	struct sched_cfg cfg = {.lanes = 2, .slots = 4, .chunk = 256, .rows = 64};

	(void)state;
	s[0].rows_each = s[1].rows_each = s[3].rows_each = true;
	sched_plan(&cfg, s, 4, 100, order, &r);
	/* 64 rows to the first, none left for the second, the plain one whole,
	 * none for the fourth */
	assert_int_equal(r.n_prefill, 2);
	assert_int_equal(s[chunks[0].seq].id, 1);
	assert_int_equal(chunks[0].n, 64);
	assert_int_equal(s[chunks[1].seq].id, 3);
	assert_int_equal(chunks[1].n, 30);
	assert_int_equal(r.prefill_tokens, 94);
	/* the first near its end leaves the rest to the second and fourth */
	s[0].prefilled = 90;
	sched_plan(&cfg, s, 4, 100, order, &r);
	assert_int_equal(r.n_prefill, 4);
	assert_int_equal(chunks[0].n, 10);
	assert_int_equal(s[chunks[1].seq].id, 2);
	assert_int_equal(chunks[1].n, 50);
	assert_int_equal(s[chunks[2].seq].id, 3);
	assert_int_equal(chunks[2].n, 30);
	assert_int_equal(s[chunks[3].seq].id, 4);
	assert_int_equal(chunks[3].n, 4);
}

/*
 * Moves (docs/design.md, section 4): one table of needs. Each row: the state
 * slots (the lanes too, as the engine has them), the snapshot, the free
 * pages, and what the round must say: who is admitted, who is restored, who
 * is the need, what it lacks (pages, a slot) and its victims in order
 * (empty: nothing moves), who decodes. Chunk 64, moves on.
 */
struct mrow {
	const char *what;
	uint32_t slots, free_pages, n;
	struct sched_seq seqs[MAXN];
	int admit[MAXN], restore[MAXN], victims[MAXN], decode[MAXN];
	int need;
	uint64_t need_pages;
	bool need_slot;
};

static const struct mrow mrows[] = {
    {"an interactive admission moves a decoding agent; the agent decodes this round still",
     2,
     0,
     2,
     {S(A, 1, 10, 4, 10, D), S(I, 2, 10, 3, 0, W)},
     NONE,
     NONE,
     {0, -1},
     {0, -1},
     1,
     3,
     false},
    {"free pages first: a need they cover moves nothing",
     2,
     3,
     2,
     {S(A, 1, 10, 4, 10, D), S(I, 2, 10, 3, 0, W)},
     {1, -1},
     NONE,
     NONE,
     {0, -1},
     -1,
     0,
     false},
    {"an agent's need never moves an interactive sequence",
     2,
     0,
     2,
     {S(I, 1, 10, 4, 10, D), S(A, 2, 10, 3, 0, W)},
     NONE,
     NONE,
     NONE,
     {0, -1},
     -1,
     0,
     false},
    {"an agent's need never moves an older agent",
     2,
     0,
     2,
     {S(A, 1, 10, 4, 10, D), S(A, 2, 10, 3, 0, W)},
     NONE,
     NONE,
     NONE,
     {0, -1},
     -1,
     0,
     false},
    {"a newer interactive never moves an older one",
     2,
     0,
     2,
     {S(I, 1, 10, 4, 10, D), S(I, 2, 10, 3, 0, W)},
     NONE,
     NONE,
     NONE,
     {0, -1},
     -1,
     0,
     false},
    {"an older interactive moves a newer one",
     2,
     0,
     2,
     {S(I, 2, 10, 4, 10, D), S(I, 1, 10, 3, 0, W)},
     NONE,
     NONE,
     {0, -1},
     {0, -1},
     1,
     3,
     false},
    {"the youngest agent moves first",
     4,
     0,
     4,
     {S(A, 1, 10, 2, 10, D), S(A, 2, 10, 2, 10, D), S(A, 3, 10, 2, 5, P), S(I, 4, 10, 2, 0, W)},
     NONE,
     NONE,
     {2, -1},
     {0, 1, -1},
     3,
     2,
     false},
    {"off the decode round before lane holders, then the latest",
     4,
     0,
     4,
     {S(A, 1, 10, 2, 5, P), S(A, 2, 10, 2, 10, D), S(A, 3, 10, 2, 10, D), S(I, 4, 10, 3, 0, W)},
     NONE,
     NONE,
     {0, 2, -1},
     {1, 2, -1},
     3,
     3,
     false},
    {"agents before interactive, whatever their arrival",
     3,
     0,
     3,
     {S(I, 2, 10, 2, 10, D), S(A, 3, 10, 2, 10, D), S(I, 1, 10, 2, 0, W)},
     NONE,
     NONE,
     {1, -1},
     {0, 1, -1},
     2,
     2,
     false},
    {"victims taken in order until they cover the need",
     4,
     1,
     4,
     {S(A, 1, 10, 2, 10, D), S(A, 2, 10, 2, 10, D), S(A, 3, 10, 2, 5, P), S(I, 4, 10, 5, 0, W)},
     NONE,
     NONE,
     {2, 1, -1},
     {0, 1, -1},
     3,
     4,
     false},
    {"a need the eligible victims cannot cover moves nothing",
     3,
     0,
     3,
     {S(I, 1, 10, 4, 10, D), S(A, 2, 10, 2, 10, D), S(I, 3, 10, 5, 0, W)},
     NONE,
     NONE,
     NONE,
     {0, 1, -1},
     -1,
     0,
     false},
    {"never a sequence mid-move; while one moves out no new victims",
     3,
     0,
     3,
     {S(A, 1, 10, 2, 10, MO), S(A, 2, 10, 2, 10, D), S(I, 3, 10, 4, 0, W)},
     NONE,
     NONE,
     NONE,
     {1, -1},
     -1,
     0,
     false},
    {"a moved sequence comes back into free room for its whole reservation",
     2,
     4,
     2,
     {S(A, 1, 10, 4, 10, MV), S(I, 2, 10, 2, 10, D)},
     NONE,
     {0, -1},
     NONE,
     {1, -1},
     -1,
     0,
     false},
    {"a moved sequence does not come back into less than its reservation",
     2,
     3,
     2,
     {S(A, 1, 10, 4, 10, MV), S(I, 2, 10, 2, 10, D)},
     NONE,
     NONE,
     NONE,
     {1, -1},
     -1,
     0,
     false},
    {"a restore never moves anything",
     2,
     0,
     2,
     {S(I, 1, 10, 4, 10, MV), S(A, 2, 10, 4, 10, D)},
     NONE,
     NONE,
     NONE,
     {1, -1},
     -1,
     0,
     false},
    {"a moved agent comes back before a later agent newcomer that would fit sooner",
     2,
     3,
     2,
     {S(A, 1, 10, 4, 10, MV), S(A, 2, 10, 1, 0, W)},
     NONE,
     NONE,
     NONE,
     NONE,
     -1,
     0,
     false},
    {"restores go in rank order, a newcomer ranked above first",
     3,
     6,
     3,
     {S(A, 2, 10, 3, 10, MV), S(A, 3, 10, 3, 10, MV), S(I, 4, 10, 3, 0, W)},
     {2, -1},
     {0, -1},
     NONE,
     NONE,
     -1,
     0,
     false},
    {"no ping-pong: a moved victim waits while the need it left for waits",
     2,
     2,
     2,
     {S(A, 1, 10, 2, 10, MV), S(I, 2, 10, 4, 0, W)},
     NONE,
     NONE,
     NONE,
     NONE,
     -1,
     0,
     false},
    {"a victim whose move the tier refused stays: the next one is taken",
     3,
     0,
     3,
     {S(A, 1, 10, 2, 10, D), {2, A, 2, 10, 2, 10, D, true, 0, false}, S(I, 3, 10, 2, 0, W)},
     NONE,
     NONE,
     {0, -1},
     {0, 1, -1},
     2,
     2,
     false},
    {"moving sequences sit out of rounds and hold no lane",
     3,
     0,
     3,
     {S(A, 1, 10, 2, 10, MO), S(A, 2, 10, 2, 10, MI), S(A, 3, 10, 2, 10, R)},
     NONE,
     NONE,
     NONE,
     {2, -1},
     -1,
     0,
     false},
    /* state slots (ADR 0027): the need is the pages and the slot it lacks */
    {"pages free, every slot taken: an interactive request moves the youngest agent for its "
     "slot",
     2,
     5,
     3,
     {S(A, 1, 10, 1, 10, D), S(A, 2, 10, 1, 10, D), S(I, 3, 10, 1, 0, W)},
     NONE,
     NONE,
     {1, -1},
     {0, 1, -1},
     2,
     0,
     true},
    {"a slot's need takes one off the decode round before a lane holder, older or not",
     2,
     5,
     3,
     {S(A, 1, 10, 1, 5, P), S(A, 2, 10, 1, 10, D), S(I, 3, 10, 1, 0, W)},
     NONE,
     NONE,
     {0, -1},
     {1, -1},
     2,
     0,
     true},
    {"pages and a slot lacking: the victims cover both",
     2,
     1,
     3,
     {S(A, 1, 10, 2, 10, D), S(A, 2, 10, 1, 10, D), S(I, 3, 10, 3, 0, W)},
     NONE,
     NONE,
     {1, 0, -1},
     {0, 1, -1},
     2,
     2,
     true},
    {"a slot's need the eligible cannot cover moves nothing: an agent never moves an "
     "interactive or older agent for a slot",
     2,
     5,
     3,
     {S(I, 1, 10, 1, 10, D), S(A, 2, 10, 1, 10, D), S(A, 3, 10, 1, 0, W)},
     NONE,
     NONE,
     NONE,
     {0, 1, -1},
     -1,
     0,
     false},
    {"the last slot goes in rank order; the next one's need moves an agent",
     2,
     5,
     3,
     {S(A, 1, 10, 1, 10, D), S(I, 2, 10, 1, 0, W), S(I, 3, 10, 1, 0, W)},
     {1, -1},
     NONE,
     {0, -1},
     {0, -1},
     2,
     0,
     true},
    {"a restore with pages but no slot waits and moves nothing",
     2,
     5,
     3,
     {S(A, 1, 10, 1, 10, D), S(A, 2, 10, 1, 10, D), S(I, 3, 10, 1, 10, MV)},
     NONE,
     NONE,
     NONE,
     {0, 1, -1},
     -1,
     0,
     false},
    {"a restore that lacks a slot blocks a newcomer ranked below it, which moves nothing",
     2,
     5,
     4,
     {S(A, 2, 10, 1, 10, D), S(A, 3, 10, 1, 10, D), S(I, 1, 10, 1, 10, MV), S(I, 4, 10, 1, 0, W)},
     NONE,
     NONE,
     NONE,
     {0, 1, -1},
     -1,
     0,
     false},
    {"a victim holds its slot until its move lands: no admission, no new victims",
     2,
     5,
     3,
     {S(A, 1, 10, 1, 10, MO), S(A, 2, 10, 1, 10, D), S(I, 3, 10, 1, 0, W)},
     NONE,
     NONE,
     NONE,
     {1, -1},
     -1,
     0,
     false},
    {"a sequence moving in holds its slot: a need for it moves a lane holder",
     2,
     5,
     3,
     {S(A, 1, 10, 1, 10, MI), S(A, 2, 10, 1, 10, D), S(I, 3, 10, 1, 0, W)},
     NONE,
     NONE,
     {1, -1},
     {1, -1},
     2,
     0,
     true},
};

static void test_moves(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof(mrows) / sizeof(mrows[0]); k++) {
		const struct mrow *rw = &mrows[k];
		uint32_t admit[MAXN], grant[MAXN], decode[MAXN], order[MAXN];
		uint32_t restore[MAXN], victims[MAXN];
		struct sched_chunk chunks[MAXN];
		struct sched_round r = {.admit = admit,
		                        .grant = grant,
		                        .decode = decode,
		                        .prefill = chunks,
		                        .restore = restore,
		                        .victims = victims};
		struct sched_cfg cfg = {
		    .lanes = rw->slots, .slots = rw->slots, .chunk = 64, .moves = true};

		sched_plan(&cfg, rw->seqs, rw->n, rw->free_pages, order, &r);
		check_list(rw->what, "admit", rw->admit, r.admit, r.n_admit);
		check_list(rw->what, "restore", rw->restore, r.restore, r.n_restore);
		check_list(rw->what, "victims", rw->victims, r.victims, r.n_victims);
		check_list(rw->what, "decode", rw->decode, r.decode, r.n_decode);
		if (r.need != rw->need || r.need_pages != rw->need_pages ||
		    r.need_slot != rw->need_slot)
			fail_msg("%s: need %lld (%llu pages%s), expected %d (%llu%s)", rw->what,
			         (long long)r.need, (unsigned long long)r.need_pages,
			         r.need_slot ? " and a slot" : "", rw->need,
			         (unsigned long long)rw->need_pages,
			         rw->need_slot ? " and a slot" : "");
		/* with moves off the same snapshot never picks a victim */
		cfg.moves = false;
		sched_plan(&cfg, rw->seqs, rw->n, rw->free_pages, order, &r);
		if (r.n_victims || r.need != -1 || r.need_pages || r.need_slot)
			fail_msg("%s: moves off, yet %u victims", rw->what, r.n_victims);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rules),
	    cmocka_unit_test(test_rank_is_a_total_order),
	    cmocka_unit_test(test_rows),
	    cmocka_unit_test(test_moves),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
