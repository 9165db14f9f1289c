/*
 * kvclient.h - the worker's client of the kvstore daemon (ignis-kvstored):
 * the tier requests of docs/protocol.md ("KV tiers") over
 * `<rtdir>/kvstore.sock`, and the KV-RAM arena mapped for the window copies.
 *
 * Nothing here blocks the caller. A decode round must never wait for the
 * kvstore daemon (issue 7: moves go a window at a time between decode
 * rounds, one window in flight per direction), so the caller starts a
 * request and polls for its reply:
 *
 *     kvc_req_reserve(&q, seq, ...);
 *     kvc_start(c, &q, &eb);               // returns at once
 *     ... decode rounds ...
 *     kvc_poll(c, &reply, &done, &eb);     // returns at once; done when answered
 *
 * How. One client thread per kvc owns the nng REQ socket and does every
 * blocking thing: send, wait for the reply, probe the daemon with kv_stats,
 * wait for it to be configured, map (and remap) the arena, whose
 * MAP_POPULATE of the whole object can take a while on a large arena. The
 * caller and that thread share a mailbox of one request and one reply under
 * a mutex that is only ever held for a few copies: kvc_start puts the
 * encoded request in it and kvc_poll takes the reply out, neither waits on
 * the socket. (nng's aio callbacks could carry the exchange too, but the
 * mapping and the waits for a restarted daemon would then run on nng's
 * shared task threads; a thread of our own keeps them off both.)
 *
 * Reconnection. The socket dials in the background and redials every 20 ms
 * to 500 ms until the daemon listens, so kvc_open succeeds with no daemon
 * there and requests complete once one starts. A request in flight when the
 * daemon dies (kill -9 included) goes again, unchanged, to the restarted
 * daemon as soon as the dialer reaches it: nng's REQ (1.5.2, req0_pipe_close)
 * puts every request sent on a connection that closes back on its send
 * queue at once, whatever NNG_OPT_REQ_RESENDTIME is; the resend time
 * (KVC_RESEND_MS) only covers a connection that stays up without an answer,
 * and the receive waits until the request's own deadline, not a socket
 * timeout. Every kv_* request may be carried out twice: a reserve asked
 * again with nothing committed gets the same answer (and one the dead daemon
 * made and never answered has no committed window: recovery reclaims it),
 * a commit of a committed window with the same checksum is a no-op, and a
 * duplicate on a live connection is served after the original (the daemon
 * serves one connection in order; REQ takes the first reply, drops the
 * other). Visible effects: a kv_drop or kv_demote that the dead daemon
 * carried out is answered IG_E_NOTFOUND by the new one, and so is a
 * kv_commit to a reservation that had no committed window when its daemon
 * died (recovery reclaimed it): the caller reserves again.
 * A restarted daemon answers IG_E_NOT_READY until the supervisor's
 * kv_config: the client then asks kv_stats every 20-200 ms until the
 * daemon names its arena, and sends the request again. All of it within
 * the request's timeout (kvc_set_timeout; KVC_TIMEOUT_MS by default, long
 * enough for the supervisor's restart backoff of up to 10 s plus a start),
 * after which the reply is IG_E_TIMEOUT naming the socket.
 *
 * The arena. The client maps the KV-RAM arena (arena_map_open) once the
 * daemon answers kv_stats with a non-empty arena_name: in the background
 * from kvc_open on, and before a kv_reserve or kv_fetch is sent when not yet
 * mapped. A kv_reserved, kv_seq or kv_staged reply that came over another connection
 * than the last kv_stats (the daemon restarted) is held back until a fresh
 * kv_stats: when the arena's name or the object under /dev/shm changed, the
 * new one is mapped before the reply is handed out, so that its offsets
 * always refer to what kvc_arena returns next. A mapping is replaced on the
 * caller's thread only, inside kvc_poll or kvc_arena: the one it replaces
 * stays mapped until the next replacement or kvc_close (time for the worker
 * to unregister it from the device), `gen` says which one is current.
 *
 * Threads. kvc_start, kvc_poll, kvc_pending, kvc_arena, kvc_set_timeout and
 * kvc_close are for one thread (the worker's loop); the client thread is
 * internal. A REQ socket carries one exchange at a time: a window moving out
 * and one coming back in flight together take two kvc's (each maps the
 * arena; offsets are the same in both).
 */
#ifndef IGNIS_GPU_WORKER_KVCLIENT_H
#define IGNIS_GPU_WORKER_KVCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kvram/kvram.h"
#include "proto/msg.h"

/* A request's default time to complete, from kvc_start: a kvstore restart by
 * the supervisor (backoff up to 10 s, then the daemon's start and the
 * reopening of its arena) fits with room to spare. */
#define KVC_TIMEOUT_MS 60000
/* NNG_OPT_REQ_RESENDTIME: a request sent on a connection that stays up but
 * is not answered goes again after this long. A closed connection resends at
 * once, whatever this is; a short value would only pile copies of a slow
 * request (a kv_verify of a large KV-disk) onto a live daemon. */
#define KVC_RESEND_MS 30000
/* The dialer's redial interval, doubling from MIN to MAX while the daemon is
 * not there (as tp_dial). */
#define KVC_RECONN_MIN_MS 20
#define KVC_RECONN_MAX_MS 500
/* No connection for this long: the dialer is replaced by a new one (nng
 * 1.5.2's dialer was seen to stop redialing after the daemon was killed and
 * restarted at once; kvclient.c, kvc__watch). Checked by kvc_poll and
 * kvc_pending, which a waiting caller calls every round. */
#define KVC_REDIAL_MS 2000
/* The most windows a sequence record has (the arena's index: arena.h's
 * ARENA_MAX_WINDOWS, checked in kvclient.c): room for a move in's sums. */
#define KVC_MAX_WINDOWS MSG_KV_WINDOWS_MAX

struct kvc;

/* Open a client of `<rtdir>/kvstore.sock`: start the client thread and the
 * background dial. Succeeds with no daemon listening (requests wait for
 * one). On success the caller owns *out and frees it with kvc_close. */
int kvc_open(struct kvc **out, const char *rtdir, struct ig_errbuf *eb);

/* Host memory the device copies windows from and to at full speed (a GPU's
 * pinned, registered memory: be_ops.host_register). `pin` is called on the
 * client thread with each arena mapping as soon as it is mapped, before any
 * reply that refers to it is handed out, and says whether it took it;
 * `unpin` is called, for a mapping it took, before that mapping is
 * unmapped (on the thread that unmaps it). A mapping not taken is used as
 * it is: copies still work, at the pageable rate; saying so is the hook's
 * part. */
struct kvc_pin {
	bool (*pin)(void *ctx, void *base, uint64_t bytes);
	void (*unpin)(void *ctx, void *base);
	void *ctx;
};
/* kvc_open with the pin hook `pin` (copied; NULL: none). */
int kvc_open_pinned(struct kvc **out, const char *rtdir, const struct kvc_pin *pin,
                    struct ig_errbuf *eb);
/* Stop the client thread, close the socket (a request in flight is
 * abandoned), unmap the arena and free `c`. NULL is a no-op. */
void kvc_close(struct kvc *c);

/* The time a request started from now on has to complete; <= 0: no limit. */
void kvc_set_timeout(struct kvc *c, int timeout_ms);

/* Start `req` (any message; normally one of the kv_* built below). It is
 * encoded before this returns, so its string views need to live only for
 * the call. IG_E_BUSY when a request is in flight or its reply was not
 * collected by kvc_poll yet (one at a time: REQ); an encoding refusal
 * (IG_E_PROTO_*) when `req` is outside its limits. Never waits. */
int kvc_start(struct kvc *c, const struct msg *req, struct ig_errbuf *eb);

/* Is the request started? Never waits. While it is not answered: returns
 * IG_E_OK with *done false. Once it is: *done true, and either IG_E_OK with
 * the reply in *reply (its type checked against the request's: kv_reserved
 * for kv_reserve, ack of the same type for kv_commit, ...), or the failure:
 * an `error` reply as its code with the daemon's message in eb (prefixed with
 * the socket and the request), IG_E_TIMEOUT, IG_E_CLOSED, a decoding
 * IG_E_PROTO_*, or the mapping's error for a kv_reserve/kv_fetch whose arena
 * cannot be mapped. Either way the request is collected and another may
 * start. The string views of *reply point into a message the client keeps
 * until the next kvc_start or kvc_close. IG_E_INVAL when no request was
 * started. */
int kvc_poll(struct kvc *c, struct msg *reply, bool *done, struct ig_errbuf *eb);

/* A request started and not collected yet. */
bool kvc_pending(struct kvc *c);

/* The KV-RAM arena as mapped here: base NULL (bytes 0) until the daemon
 * named one and it was mapped. Offsets in kv_reserved, kv_seq and kv_staged count from
 * `base`. `gen` grows by one each time another mapping takes over (the
 * daemon serves another arena object); a base from an earlier gen stays
 * mapped until the gen after the next one, or kvc_close. */
struct kvc_arena {
	void *base;
	uint64_t bytes;
	uint64_t gen; /* 0 until mapped */
};
struct kvc_arena kvc_arena(struct kvc *c);

/* Retained host slot `slot` as the current mapping shows it now
 * (arena_map_slot): a claimant's check, after copying a slot's image out,
 * that it still holds the generation it claimed. IG_E_NOTFOUND when no
 * arena is mapped or `slot` is past the last. */
int kvc_slot_now(struct kvc *c, uint32_t slot, struct arena_slot_info *out, struct ig_errbuf *eb);

/* ---- the requests (msg.h fields; string views must live until kvc_start) ---- */

/* The retained host slots' requests (docs/protocol.md; ADR 0016): a
 * capture's kv_slot reply carries an offset in the arena, as kv_reserved
 * does, and is held back the same way after a daemon restart. */
void kvc_req_slot_capture(struct msg *q, uint64_t key, uint64_t model_id, bool prefix,
                          const char *cls, uint32_t tokens, uint64_t image_bytes);
void kvc_req_slot_publish(struct msg *q, uint32_t slot, uint64_t gen, uint64_t sum);
void kvc_req_slot_claim(struct msg *q, uint64_t key, uint64_t model_id);
void kvc_req_slot_drop(struct msg *q, uint32_t slot, uint64_t gen);

/* kv_reserve: room for `image_bytes` in windows of `window_bytes`; `cls` is
 * "interactive" or "agent". */
void kvc_req_reserve(struct msg *q, uint64_t seq, uint64_t model_id, uint32_t kv_format,
                     const char *cls, uint64_t image_bytes, uint64_t window_bytes);
/* kv_commit of window `window` (`len` bytes whose checksum is `sum`). */
void kvc_req_commit(struct msg *q, uint64_t seq, uint64_t window, uint64_t len, uint64_t sum);
/* kv_commit of window k of an image placed at `offset` in the mapped arena
 * (the kv_reserved reply): its length and checksum taken from the bytes in
 * place. IG_E_INVAL when k is past the last window, IG_E_NOTFOUND when no
 * arena is mapped, IG_E_PROTO_FIELD_RANGE when the window is outside it. */
int kvc_req_commit_window(struct kvc *c, struct msg *q, uint64_t seq, uint64_t offset,
                          uint64_t image_bytes, uint64_t window_bytes, uint64_t k,
                          struct ig_errbuf *eb);
/* Copy window k of an image from `src` (the window's own bytes) into its
 * place in the mapped arena and build its kv_commit, the checksum taken while
 * copying (one pass: kvcopy.h). The errors of kvc_req_commit_window. */
int kvc_write_window(struct kvc *c, struct msg *q, uint64_t seq, uint64_t offset,
                     uint64_t image_bytes, uint64_t window_bytes, uint64_t k, const void *src,
                     struct ig_errbuf *eb);
/* Copy window k of an image at `offset` out of the arena into `dst`,
 * checking its bytes against `sum` (the fetch reply's kv_seq.sums[k]: the
 * daemon sends each committed window's recorded checksum) in the same pass.
 * IG_E_KV_LOST when they differ: `dst` must not be used (the daemon never
 * re-reads committed bytes; the reader is the check, ADR 0015). */
int kvc_read_window(struct kvc *c, uint64_t seq, uint64_t offset, uint64_t image_bytes,
                    uint64_t window_bytes, uint64_t k, uint64_t sum, void *dst,
                    struct ig_errbuf *eb);
void kvc_req_fetch(struct msg *q, uint64_t seq);
/* kv_sweep: drop every sequence of another owner than `keep_owner` (msg.h). */
void kvc_req_sweep(struct msg *q, uint32_t keep_owner);
/* kv_stage: window `window` of a sequence a kv_fetch found on disk ("disk"
 * tier), into its staging window; the kv_staged reply says where (offset in
 * the mapped arena), its length and checksum. */
void kvc_req_stage(struct msg *q, uint64_t seq, uint64_t window);
void kvc_req_drop(struct msg *q, uint64_t seq);
void kvc_req_list(struct msg *q, uint64_t after);
void kvc_req_stats(struct msg *q);

/* Window k of an image of `image_bytes` cut in windows of `window_bytes`:
 * its start from the image's offset, and its length (the last may be
 * short). False when k is past the last window or a size is 0. */
bool kvc_window(uint64_t image_bytes, uint64_t window_bytes, uint64_t k, uint64_t *at,
                uint64_t *len);

/* The checksum of a window as the reader checks it (kvcopy_sum: XXH3-64,
 * seed 0). */
uint64_t kvc_sum(const void *p, size_t n);

#endif
