/*
 * copier.h - the cpu backend's copy engine: moves' window copies run on a
 * thread of their own, beside the round's compute, as a GPU's copy engine
 * runs a cudaMemcpyAsync beside its kernels.
 *
 * A move copies a window between a sequence's pages and the KV-RAM arena
 * (gathering it out, or scattering it in, with its checksum on the way:
 * seqimg.h). Done on the engine's thread, that copy lengthens the round it
 * falls in for every other lane; here the engine posts it before the
 * round's compute and collects it after. Safe because the sequence being
 * moved sits out of rounds: nothing else reads or writes its pages or state
 * while its copy runs (the engine waits for a posted copy before it gives
 * the sequence's pages back, e.g. on a cancel).
 *
 * Two lanes (one per direction: a move out and a move in may each have one
 * copy in flight, as one window in flight per direction). One thread runs
 * them in the order posted. Not a general pool: one owner thread posts,
 * polls and waits.
 */
#ifndef IGNIS_GPU_WORKER_COPIER_H
#define IGNIS_GPU_WORKER_COPIER_H

#include <stdbool.h>

#include "err.h"

#define COPIER_LANES 2

struct copier;

/* Start the copy thread. On success the caller owns *out. */
int copier_open(struct copier **out, struct ig_errbuf *eb);
/* Wait for the posted copies, stop the thread, free. NULL is a no-op. */
void copier_close(struct copier *c);

/* Run fn(ctx) on the copy thread. The lane must be free: never posted, or
 * its last copy finished (copier_busy false). */
void copier_post(struct copier *c, int lane, void (*fn)(void *ctx), void *ctx);
/* Is a copy posted on `lane` and not finished? Never waits; once it says
 * false, what the copy wrote is visible to the caller. */
bool copier_busy(struct copier *c, int lane);
/* Wait until `lane`'s copy (if any) has finished. */
void copier_wait(struct copier *c, int lane);

#endif
