/*
 * bench_kvformat.h - ignis-bench's kvformat part: the KV formats' quality
 * against exact float vectors, side by side (issue 28, item 4). A
 * measurement, not a test: it prints figures and asserts none.
 */
#ifndef IGNIS_TOOLS_BENCH_KVFORMAT_H
#define IGNIS_TOOLS_BENCH_KVFORMAT_H

/* Print the table (tools/bench_kvformat.c says what is in it) on stdout.
 * `reps` is ignis-bench's repetition count: below 5 (--quick) the
 * attention part stops at 4K keys and the end-to-end context is 512
 * tokens instead of 2K. Exits 1 when a model cannot be written, bound or
 * run, as the other parts do. */
void bkvf_run(int reps);

#endif
