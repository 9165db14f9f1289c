/*
 * kvcopy.h - copying a KV window and checksumming it in one pass.
 *
 * Every KV byte that crosses a tier is copied once and hashed once, and both
 * happen in the same pass over memory. The checksum is XXH3's 64-bit hash
 * with seed 0 (libxxhash's XXH3_64bits): on the development VM XXH64 ran at
 * about memcpy's rate, so even in one pass it cost 10-25% of a copy's
 * throughput, where XXH3 keeps pace with memory (ADR 0015). The
 * window goes in slices of KVCOPY_SLICE bytes, each slice hashed first
 * (which brings it into the cache) and then copied out of the cache with
 * non-temporal stores (the destination is not read again by this CPU soon:
 * KV-RAM's bytes go to the device or the disk, a restored window to the KV
 * pool). Memory sees one read and one write of the window, which is what a
 * bare memcpy costs (ADR 0015: who checks KV-RAM's bytes).
 *
 * The writer of a window (the worker moving a sequence out, the operator's
 * `put`, the daemon loading a disk record) takes the checksum of what it
 * copies with kvcopy_hash and gives it at commit; the reader (the worker
 * restoring, `get`, a demotion to disk) copies with kvcopy_check against the
 * recorded checksum and throws the copy away when they differ.
 */
#ifndef IGNIS_KVSTORE_KVCOPY_H
#define IGNIS_KVSTORE_KVCOPY_H

#include <stdbool.h>
#include <stdint.h>

/* Hash-then-copy granule: the slice the hash brought in is still in L1d
 * (32 KiB on the development VM's EPYC) when the copy reads it; 128 KiB slices
 * (L2) measured a few points lower at 256 KiB windows (docs/benchmarks.md). */
#define KVCOPY_SLICE (64u * 1024u)

/* Copy `len` bytes from `src` to `dst` (not overlapping) and return the
 * checksum (XXH3-64, seed 0) of the bytes copied. */
uint64_t kvcopy_hash(void *dst, const void *src, uint64_t len);

/* The checksum of a window's bytes in place (no copy): what kvcopy_hash
 * returns for the same bytes. For bytes that arrived by DMA, and checks. */
uint64_t kvcopy_sum(const void *p, uint64_t len);

/* A window gathered from (or scattered to) several places in one pass: reset,
 * copy each piece, then the sum, which is kvcopy_sum of the pieces end to
 * end. Lives on the stack for one window (64-byte aligned). */
struct kvcopy_stream {
	_Alignas(64) unsigned char opaque[640];
};
void kvcopy_stream_reset(struct kvcopy_stream *s);
void kvcopy_stream_copy(struct kvcopy_stream *s, void *dst, const void *src, uint64_t len);
uint64_t kvcopy_stream_sum(struct kvcopy_stream *s);

/* Copy `len` bytes and say whether they hash to `want`. On false, `dst`
 * holds bytes that must not be used (the copy is complete but unchecked
 * bytes are not served). `*got` (may be NULL) receives the hash. */
bool kvcopy_check(void *dst, const void *src, uint64_t len, uint64_t want, uint64_t *got);

#endif
