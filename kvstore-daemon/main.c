/*
 * ignis-kvstored - owns host KV memory (KV-RAM: a shared-memory arena the
 * gpu-worker maps) and the LMDB disk tier (KV-disk). Restartable on its own:
 * the arena outlives the process and its index is inside it, so a restarted
 * daemon serves every window it acknowledged in either tier.
 *
 * The supervisor sends kv_config after hello; until then every tier request
 * is refused (IG_E_BUSY, "not configured"). Bytes never travel in messages:
 * they are written to and read from the arena; messages carry offsets,
 * lengths and checksums (docs/protocol.md, "KV tiers").
 *
 * Policies (docs/design.md, section 5):
 *   - with KV-disk on, KV-RAM gives complete sequences up to disk (demotes
 *     them, one per loop turn, agent first, then least recently used) only
 *     to make room for a read's staging window (ADR 0020); a reserve it
 *     cannot take goes straight to disk (below);
 *   - with KV-disk off, KV-RAM gives a complete sequence up (agent first,
 *     then least recently used; an interactive one idle past
 *     --reuse-retained-interactive-ttl counts as an agent) for the newer
 *     reservation at once, and says which in the reply (`given_up`): that
 *     request is prefilled again;
 *   - with KV-disk on, a reserve KV-RAM cannot take goes straight to disk:
 *     the reply names tier "disk" and a staging window in the arena; each
 *     window the writer commits there is copied into KV-disk (checked on
 *     the way) before the commit is acknowledged, and the sequence counts as
 *     held only once its last window is on disk. A fetch of a sequence on
 *     disk leaves it there and serves it a window at a time through a
 *     staging window (kv_stage), each checked while copied: disk to device,
 *     never through KV-RAM. A sequence lives in one tier. Staging windows
 *     are arena reservations keyed KVS_STAGE_BIT | seq that are never
 *     committed, so a restarted daemon reclaims them;
 *   - a read from KV-disk always gets its staging window (ADR 0020): from
 *     free room; else from the staging windows of reads that ended; else
 *     KV-RAM demotes a complete sequence KV-disk can take (one per loop
 *     turn: ask again); else, both tiers full, KV-RAM gives a complete
 *     sequence up for it (named in ignis.kvstore.given_up: that request is
 *     prefilled again). A write straight to disk takes the same steps but
 *     the last: it is refused instead (the victim stays on the device);
 *   - at configuration, a damaged KV-RAM index record costs its sequence
 *     alone (ignis.kvstore.ram_record_dropped, counted as lost); the rest
 *     is served;
 *   - warnings a retry loop can repeat are rate-limited (kvs_warn).
 *
 * IGNIS_TEST_KVDISK_IGNORE_VOLUME (tests only): take --reuse-kv-disk-bytes as
 * the ceiling without the volume rule (free - 10 GiB), for small CI disks.
 * IGNIS_TEST_SLOT_WRITE_STALE_S (tests only): the seconds after which a
 * retained slot captured and never published is taken back (default
 * KVS_SLOT_WRITE_STALE_S).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "arena.h"
#include "proto/daemon.h"
#include "common/event.h"
#include "kvram/kvcopy.h"
#include "kvdisk.h"

/* Keys with this bit are the daemon's staging windows; a sequence's key is
 * below it (a reserve above is refused). */
#define KVS_STAGE_BIT (UINT64_C(1) << 63)
#define KVS_STAGES    16u
/* A staging window nobody used for this long is given back (and a write
 * straight to disk it served abandoned): its owner died or gave up. Its
 * owner coming back later opens another (a read) or starts again (a write:
 * its commit is answered "not found"). Either way nothing is served that
 * was not checked: a reader checks the staged bytes against their sum. */
#define KVS_STAGE_IDLE_S 60u
/* A read whose last window was staged this long ago has its bytes: its
 * staging window goes to another reader or writer that needs the room
 * (the worker drops it within a round; ignis-kvstore-ctl never does). */
#define KVS_STAGE_DONE_S 5u
/* Repeated warnings: the first KVS_WARN_BURST of a kind in each
 * KVS_WARN_WINDOW_S are logged, the rest counted into one summary. */
#define KVS_WARN_BURST    3u
#define KVS_WARN_WINDOW_S 60u

/* A warning a retry loop can repeat (a demotion KV-disk refuses, a read or
 * write with no staging room): rate-limited, so a client asking again every
 * 50 ms for 10 s writes a few lines and a summary, not hundreds. */
struct kvs_warn {
	const char *event;
	uint64_t since_s;    /* the window's start */
	uint32_t n;          /* logged in it */
	uint64_t suppressed; /* counted, not logged */
};

/* A request's listing of a tier: the sequences it looks at, at most; and of
 * the slots, a kv_slot_list_reply's (proto/msg.h). */
#define KVS_SCAN_MAX  65536u
#define KVS_SLOT_SCAN 128u

/* When each sequence was last used (monotonic seconds), for the interactive
 * TTL; the daemon's own memory: after a restart every sequence counts as
 * used at the restart. */
#define KVS_TOUCH_SLOTS 4096u
struct kvs_touch {
	uint64_t seq, at_s;
};

/* The daemon's context: everything it holds, built by main and passed down;
 * the program has no other mutable state but the daemon skeleton's signal
 * flags and the early log sink (style rule 13). */
struct kvs {
	const struct svc *svc; /* the control service, while dmn_run runs */
	struct arena *ram;
	struct kvdisk *disk;
	char arena_name[97], disk_path[4097];
	uint64_t arena_bytes, disk_flag, ttl_s;
	uint32_t slots;
	uint64_t slot_bytes;
	uint64_t slot_touch_s[ARENA_SLOTS_MAX]; /* each slot's last capture or claim */
	uint64_t started_s; /* when the tiers opened: a recovered sequence's last use */
	/* background demotions: room wanted in KV-RAM (0: none) */
	uint64_t want_room;
	uint64_t demotions, direct_writes, disk_reads, ram_evictions, lost;
	/* staging windows: sequences going to or coming from KV-disk a window
	 * at a time (one per sequence, either way) */
	struct kvs_stage {
		uint64_t seq, offset;
		uint64_t window_bytes; /* the sequence's windows */
		uint64_t bytes;        /* the staging window: its largest window */
		uint64_t used_s;       /* last opened, staged into or committed from */
		bool used;
		bool done; /* a read whose last window was staged */
	} stages[KVS_STAGES];
	struct kvs_warn warn_demote, warn_stage;
	struct kvs_touch touched[KVS_TOUCH_SLOTS]; /* by seq % KVS_TOUCH_SLOTS */
	struct arena_info list[65536];             /* KV-RAM's sequences, for kvs_demotable */
	/* one request's listings of the tiers (sweep, list, verify) and of the
	 * slots: the handler runs one request at a time, on one thread */
	struct arena_info ram_scan[KVS_SCAN_MAX];
	struct kvdisk_seq disk_scan[KVS_SCAN_MAX];
	struct arena_slot_info slot_scan[KVS_SLOT_SCAN];
	/* the windows of one sequence, for get/put */
	struct arena_window w[ARENA_MAX_WINDOWS];
	uint64_t sums[ARENA_MAX_WINDOWS]; /* a disk record's window checksums */
};

static uint64_t kvs_now_s(void);

static const char *kvs_class_name(uint32_t cls)
{
	return cls == ARENA_INTERACTIVE ? "interactive" : "agent";
}

static int kvs_class(struct msg_str s, uint32_t *out, struct ig_errbuf *eb)
{
	if (msg_str_eq(s, "interactive"))
		*out = ARENA_INTERACTIVE;
	else if (msg_str_eq(s, "agent"))
		*out = ARENA_AGENT;
	else
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "class: '%.*s'; accepted: interactive, agent", (int)s.n, s.p);
	return IG_E_OK;
}

/* mkdir -p with 0700 for the directories we create. */
static int kvs_mkdirs(const char *path, struct ig_errbuf *eb)
{
	char buf[4097];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return ig_errf(eb, IG_E_CONFIG, "KV-disk path too long (%zu bytes)", n);
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) && errno != EEXIST)
			return ig_errf(eb, IG_E_IO, "creating %s: %s", buf, strerror(errno));
		*p = '/';
	}
	if (mkdir(buf, 0700) && errno != EEXIST)
		return ig_errf(eb, IG_E_IO, "creating %s: %s", buf, strerror(errno));
	return IG_E_OK;
}

/* What the arena's recovery found damaged: each record dropped costs its
 * own sequence (its owner finds it held nowhere and prefills it again); a
 * header rebuilt from the configuration costs nothing. */
static void kvs_report_recovery(const struct kvs *k)
{
	struct arena_damage d[ARENA_DAMAGE_DETAILS];
	uint32_t n = arena_damaged(k->ram, d, ARENA_DAMAGE_DETAILS);
	const char *rebuilt = arena_repaired(k->ram);
	struct ev e;

	if (rebuilt) {
		ev_begin(&e, EV_WARN, "ignis.kvstore.ram_header_repaired");
		ev_str(&e, "arena", k->arena_name);
		ev_str(&e, "detail", rebuilt);
		ev_end(&e);
	}
	for (uint32_t i = 0; i < n && i < ARENA_DAMAGE_DETAILS; i++) {
		ev_begin(&e, EV_WARN, "ignis.kvstore.ram_record_dropped");
		ev_str(&e, "arena", k->arena_name);
		ev_u64(&e, "record", d[i].record);
		ev_u64(&e, "seq", d[i].seq);
		ev_str(&e, "why", d[i].why);
		ev_str(&e, "detail",
		       "a damaged KV-RAM index record: its sequence is lost (its request is "
		       "prefilled again); the rest of KV-RAM is served");
		ev_end(&e);
	}
	if (n > ARENA_DAMAGE_DETAILS) {
		ev_begin(&e, EV_WARN, "ignis.kvstore.ram_record_dropped");
		ev_str(&e, "arena", k->arena_name);
		ev_u64(&e, "more", n - ARENA_DAMAGE_DETAILS);
		ev_str(&e, "detail",
		       "more damaged KV-RAM index records dropped, each its sequence");
		ev_end(&e);
	}
}

static int kvs_configure(struct kvs *k, const struct msg_kv_config *c, struct ig_errbuf *eb)
{
	char name[97], path[4097];
	struct arena_stats as;
	struct ev e;
	int rc;

	msg_str_copy(name, sizeof(name), c->arena_name);
	msg_str_copy(path, sizeof(path), c->disk_path);
	if (k->ram) {
		/* the same configuration again (a retried greeting) is fine */
		if (!strcmp(name, k->arena_name) && c->arena_bytes == k->arena_bytes &&
		    !strcmp(path, k->disk_path) && c->disk_bytes == k->disk_flag &&
		    c->retained_slots == k->slots && c->slot_bytes == k->slot_bytes)
			return IG_E_OK;
		return ig_errf(eb, IG_E_BUSY,
		               "kv_config: this daemon already serves arena '%s' of %" PRIu64
		               " bytes; restart it to change its tiers",
		               k->arena_name, k->arena_bytes);
	}
	if ((c->retained_slots == 0) != (c->slot_bytes == 0))
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "kv_config: %" PRIu64 " retained slots of %" PRIu64
		               " bytes; accepted: both 0, or both above 0",
		               c->retained_slots, c->slot_bytes);
	rc = arena_open_slots(&k->ram, name, c->arena_bytes, (uint32_t)c->retained_slots,
	                      c->slot_bytes, eb);
	if (rc)
		return rc;
	k->slots = (uint32_t)c->retained_slots;
	k->slot_bytes = c->slot_bytes;
	snprintf(k->arena_name, sizeof(k->arena_name), "%s", name);
	k->arena_bytes = c->arena_bytes;
	k->disk_flag = c->disk_bytes;
	k->ttl_s = c->interactive_ttl_s;
	k->started_s = kvs_now_s();
	kvs_report_recovery(k);
	snprintf(k->disk_path, sizeof(k->disk_path), "%s", path);
	if (c->disk_bytes && path[0]) {
		rc = kvs_mkdirs(path, eb);
		if (!rc)
			rc = kvdisk_open(&k->disk, path, c->disk_bytes, ARENA_BLOCK,
			                 getenv("IGNIS_TEST_KVDISK_IGNORE_VOLUME")
			                     ? KVDISK_OPEN_IGNORE_VOLUME
			                     : 0,
			                 eb);
		if (rc) {
			/* refuse nobody: KV-RAM alone still serves, said loudly */
			ev_begin(&e, EV_WARN, "ignis.kvstore.disk_off");
			ev_str(&e, "path", path);
			ev_str(&e, "detail", eb->msg);
			ev_end(&e);
			k->disk = NULL;
		}
	}
	arena_stats(k->ram, &as);
	ev_begin(&e, EV_INFO, "ignis.kvstore.tiers");
	ev_str(&e, "arena", k->arena_name);
	ev_u64(&e, "kv_ram_bytes", as.bytes);
	ev_u64(&e, "recovered_sequences", as.recovered_sequences);
	ev_u64(&e, "reclaimed_sequences", as.reclaimed_sequences);
	ev_u64(&e, "damaged_sequences", as.damaged_sequences);
	ev_u64(&e, "retained_host_slots", as.slots);
	ev_u64(&e, "retained_slot_bytes", as.slot_bytes);
	ev_u64(&e, "recovered_slots", as.slots_recovered);
	ev_u64(&e, "lost_slots", as.slots_lost);
	ev_bool(&e, "kv_disk", k->disk != NULL);
	if (k->disk) {
		struct kvdisk_stats ds;

		kvdisk_stats(k->disk, &ds);
		ev_str(&e, "kv_disk_path", k->disk_path);
		ev_u64(&e, "kv_disk_ceiling_bytes", ds.ceiling_bytes);
		ev_u64(&e, "kv_disk_sequences", ds.sequences);
	}
	ev_end(&e);
	return IG_E_OK;
}

/* Move a complete sequence from KV-RAM to KV-disk. */
static int kvs_demote(struct kvs *k, uint64_t seq, struct ig_errbuf *eb)
{
	struct arena_info info;
	struct ev e;
	int rc;

	if (!k->disk)
		return ig_errf(eb, IG_E_INVAL, "seq %" PRIu64 ": KV-disk is off", seq);
	rc = arena_get(k->ram, seq, &info, k->w, ARENA_MAX_WINDOWS, eb);
	if (rc)
		return rc;
	if (!info.complete)
		return ig_errf(eb, IG_E_INVAL,
		               "seq %" PRIu64 ": %u of %u windows committed; only a complete "
		               "sequence goes to disk",
		               seq, info.committed, info.meta.windows);
	rc = kvdisk_put(k->disk, &info.meta, arena_base(k->ram), k->w, eb);
	if (rc)
		return rc;
	rc = arena_drop(k->ram, seq, eb);
	if (rc)
		return rc;
	k->demotions++;
	ev_begin(&e, EV_INFO, "ignis.kvstore.demoted");
	ev_u64(&e, "seq", seq);
	ev_u64(&e, "bytes", info.meta.image_bytes);
	ev_u64(&e, "windows", info.meta.windows);
	ev_end(&e);
	return IG_E_OK;
}

static uint64_t kvs_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

static void kvs_touch(struct kvs *k, uint64_t seq)
{
	struct kvs_touch *t = &k->touched[seq % KVS_TOUCH_SLOTS];

	t->seq = seq;
	t->at_s = kvs_now_s();
}

static uint64_t kvs_idle_s(const struct kvs *k, uint64_t seq)
{
	const struct kvs_touch *t = &k->touched[seq % KVS_TOUCH_SLOTS];
	uint64_t at = t->seq == seq ? t->at_s : k->started_s;

	return kvs_now_s() - at;
}

/* The sequence KV-RAM gives up first, to KV-disk or (KV-disk off) for good
 * (docs/design.md, section 5): the lowest class first, an interactive one idle past
 * --reuse-retained-interactive-ttl counting as an agent, then the least
 * recently used; complete ones only, never `except` nor one of `skip`. 0
 * when none. */
static bool kvs_idle_interactive(void *ctx, uint64_t seq)
{
	const struct kvs *k = ctx;

	return k->ttl_s && kvs_idle_s(k, seq) > k->ttl_s;
}

static uint64_t kvs_victim(struct kvs *k, uint64_t except, const uint64_t *skip, uint32_t n_skip)
{
	return arena_pick_victim_ex(k->ram, except, skip, n_skip, kvs_idle_interactive, k);
}

static struct kvs_stage *kvs_stage_find(struct kvs *k, uint64_t seq)
{
	for (uint32_t i = 0; i < KVS_STAGES; i++)
		if (k->stages[i].used && k->stages[i].seq == seq)
			return &k->stages[i];
	return NULL;
}

/* Once a window has passed: one event with the count of the warnings held
 * back in it (if any), and the next warning opens a new window. */
static void kvs_warn_flush(struct kvs_warn *w, uint64_t now)
{
	struct ev e;

	if (!w->n || now - w->since_s < KVS_WARN_WINDOW_S)
		return;
	if (w->suppressed) {
		ev_begin(&e, EV_WARN, w->event);
		ev_u64(&e, "suppressed", w->suppressed);
		ev_u64(&e, "window_s", KVS_WARN_WINDOW_S);
		ev_str(&e, "detail", "more warnings like the ones before, not logged one by one");
		ev_end(&e);
	}
	w->n = 0;
	w->suppressed = 0;
}

/* May a warning of `w`'s kind be logged now? The first KVS_WARN_BURST of
 * a window may; the rest are counted for the summary. */
static bool kvs_warn_take(struct kvs_warn *w)
{
	uint64_t now = kvs_now_s();

	kvs_warn_flush(w, now);
	if (!w->n)
		w->since_s = now;
	if (w->n < KVS_WARN_BURST) {
		w->n++;
		return true;
	}
	w->suppressed++;
	return false;
}

/* Is there a complete KV-RAM sequence KV-disk can take now, so that a
 * demotion would make room? */
static bool kvs_demotable(struct kvs *k)
{
	uint32_t n;

	if (!k->disk)
		return false;
	n = arena_list(k->ram, k->list, sizeof(k->list) / sizeof(k->list[0]));
	for (uint32_t i = 0; i < n; i++)
		if (k->list[i].complete && !(k->list[i].meta.seq & KVS_STAGE_BIT) &&
		    kvdisk_fits(k->disk, &k->list[i].meta))
			return true;
	return false;
}

static void kvs_stage_close(struct kvs *k, uint64_t seq);

/* A staging window refused: the sequence asked for (not the staging key),
 * what each tier holds and what happens next. Unless KV-RAM is `demoting`
 * to make the room (then asking again will do), nothing changes by itself:
 * the refusal is also a (rate-limited) warning. */
static int kvs_stage_refused(struct kvs *k, const struct arena_meta *of, uint64_t bytes, bool read,
                             bool demoting, struct ig_errbuf *eb)
{
	struct arena_stats st;
	const char *then;
	char disk[160];
	struct ev e;

	arena_stats(k->ram, &st);
	if (k->disk) {
		struct kvdisk_stats ds;

		kvdisk_stats(k->disk, &ds);
		snprintf(disk, sizeof(disk),
		         "KV-disk holds %" PRIu64 " of its %" PRIu64 "-byte ceiling", ds.used_bytes,
		         ds.ceiling_bytes);
	} else {
		snprintf(disk, sizeof(disk), "KV-disk is off");
	}
	then = demoting           ? "KV-RAM is giving a complete sequence to KV-disk to make the "
	                            "room: ask again"
	       : bytes > st.bytes ? "the window is larger than all of KV-RAM: raise "
	                            "--reuse-kv-ram-bytes to read it"
	       : read             ? "what KV-RAM holds is being written or read, none of it can be "
	                            "given up now: ask again"
	                          : "the write is refused, the sequence stays where it is";
	ig_errf(eb, IG_E_NOSPACE,
	        "seq %" PRIu64 ": its %s KV-disk needs a staging window of %" PRIu64
	        " bytes in KV-RAM, which has none (the largest free extent is %" PRIu64
	        " bytes, %" PRIu64 " free of %" PRIu64 "); %s; %s",
	        of->seq, read ? "read back from" : "write straight to", bytes, st.largest_free,
	        st.free_bytes, st.bytes, disk, then);
	if (!demoting && kvs_warn_take(&k->warn_stage)) {
		ev_begin(&e, EV_WARN, k->warn_stage.event);
		ev_u64(&e, "seq", of->seq);
		ev_str(&e, "detail", eb->msg);
		ev_end(&e);
	}
	return IG_E_NOSPACE;
}

/*
 * Room for the staging window `m` of `of` when KV-RAM has none free
 * (ADR 0020): the staging windows of reads that ended; else a demotion of
 * a complete sequence KV-disk can take (kvs_work, one a loop turn: ask
 * again); else, for a read, KV-RAM gives up complete sequences (kvs_victim's
 * order) until it fits, when giving them up can make it fit at all: a
 * sequence on disk must always be able to come back, and with both tiers
 * full nothing else can make the room. IG_E_OK with
 * *offset, or IG_E_NOSPACE naming `of` and both tiers.
 */
static int kvs_stage_room(struct kvs *k, const struct arena_meta *of, const struct arena_meta *m,
                          bool read, uint64_t *offset, struct ig_errbuf *eb)
{
	uint64_t now = kvs_now_s();
	struct ig_errbuf e2;
	bool freed = false;

	for (uint32_t i = 0; i < KVS_STAGES; i++) {
		struct kvs_stage *g = &k->stages[i];

		if (g->used && g->done && g->seq != of->seq &&
		    now - g->used_s >= KVS_STAGE_DONE_S) {
			kvs_stage_close(k, g->seq);
			freed = true;
		}
	}
	if (freed && arena_reserve(k->ram, m, offset, &e2) == IG_E_OK)
		return IG_E_OK;
	if (kvs_demotable(k)) {
		if (m->image_bytes > k->want_room)
			k->want_room = m->image_bytes;
		return kvs_stage_refused(k, of, m->image_bytes, read, true, eb);
	}
	while (read && arena_fits_if_given_up(k->ram, m->image_bytes)) {
		uint64_t v = kvs_victim(k, 0, NULL, 0);
		struct ev e;

		if (!v || arena_drop(k->ram, v, &e2) != IG_E_OK)
			break;
		k->ram_evictions++;
		ev_begin(&e, EV_WARN, "ignis.kvstore.given_up");
		ev_u64(&e, "seq", v);
		ev_u64(&e, "for_seq", of->seq);
		ev_str(&e, "detail",
		       "KV-RAM and KV-disk are full: given up so that a sequence on KV-disk can "
		       "be read back; that request will be prefilled again");
		ev_end(&e);
		if (arena_reserve(k->ram, m, offset, &e2) == IG_E_OK)
			return IG_E_OK;
	}
	return kvs_stage_refused(k, of, m->image_bytes, read, false, eb);
}

/* The staging window of `seq` (its largest window's bytes of the arena),
 * opened when it has none, for a read from KV-disk or a write straight to
 * it. IG_E_NOSPACE when no room can be had for it now (kvs_stage_room). */
static int kvs_stage_open(struct kvs *k, const struct arena_meta *of, bool read,
                          struct kvs_stage **out, struct ig_errbuf *eb)
{
	struct kvs_stage *g = kvs_stage_find(k, of->seq);
	struct arena_meta m = *of;
	uint64_t offset,
	    bytes = of->window_bytes < of->image_bytes ? of->window_bytes : of->image_bytes;
	int rc;

	if (g && g->window_bytes == of->window_bytes && g->bytes == bytes) {
		g->used_s = kvs_now_s();
		g->done = false;
		*out = g;
		return IG_E_OK;
	}
	if (g) { /* another shape (a new write of the seq): a new window */
		struct ig_errbuf e2;

		(void)arena_drop(k->ram, KVS_STAGE_BIT | g->seq, &e2);
		g->used = false;
	}
	for (uint32_t i = 0; i < KVS_STAGES && !g; i++)
		if (!k->stages[i].used)
			g = &k->stages[i];
	if (!g)
		return ig_errf(eb, IG_E_BUSY,
		               "seq %" PRIu64
		               ": %u sequences are moving to or from KV-disk already; "
		               "try again when one is done",
		               of->seq, KVS_STAGES);
	m.seq = KVS_STAGE_BIT | of->seq;
	m.image_bytes = bytes;
	m.window_bytes = (uint32_t)bytes;
	m.windows = 1;
	rc = arena_reserve(k->ram, &m, &offset, eb);
	if (rc == IG_E_BUSY) { /* this daemon's own leftover: free it, again */
		struct ig_errbuf e2;

		(void)arena_drop(k->ram, m.seq, &e2);
		rc = arena_reserve(k->ram, &m, &offset, eb);
	}
	if (rc == IG_E_NOSPACE)
		rc = kvs_stage_room(k, of, &m, read, &offset, eb);
	if (rc)
		return rc;
	*g = (struct kvs_stage){of->seq, offset, of->window_bytes, m.image_bytes, kvs_now_s(),
	                        true,    false};
	*out = g;
	return IG_E_OK;
}

static void kvs_stage_close(struct kvs *k, uint64_t seq)
{
	struct kvs_stage *g = kvs_stage_find(k, seq);
	struct ig_errbuf e2;

	if (!g)
		return;
	(void)arena_drop(k->ram, KVS_STAGE_BIT | seq, &e2);
	g->used = false;
}

/* A reserve KV-RAM cannot take, straight to KV-disk: the whole image counted
 * against the disk's ceiling now, its windows through a staging window. */
static int kvs_reserve_disk(struct kvs *k, const struct arena_meta *m, uint64_t *offset,
                            struct ig_errbuf *eb)
{
	struct kvs_stage *g;
	int rc = kvdisk_wbegin(k->disk, m, eb);

	if (rc)
		return rc;
	rc = kvs_stage_open(k, m, false, &g, eb);
	if (rc) {
		(void)kvdisk_wabort(k->disk, m->seq);
		return rc;
	}
	*offset = g->offset;
	return IG_E_OK;
}

static int kvs_reserve(struct kvs *k, const struct msg_kv_reserve *q, struct msg *reply,
                       struct ig_errbuf *eb)
{
	const char *tier = "ram";
	struct arena_meta m = {0};
	uint64_t offset = 0, given_up = 0;
	int rc;

	rc = kvs_class(q->class, &m.cls, eb);
	if (rc)
		return rc;
	m.seq = q->seq;
	m.model_id = q->model_id;
	m.kv_format = (uint32_t)q->kv_format;
	m.image_bytes = q->image_bytes;
	m.window_bytes = (uint32_t)q->window_bytes;
	m.windows = (uint32_t)((q->image_bytes + q->window_bytes - 1) / q->window_bytes);
	if (m.seq & KVS_STAGE_BIT)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "kv_reserve: seq %016" PRIx64 " has the top bit set (the daemon's "
		               "staging windows); accepted: 1 to 2^63-1",
		               m.seq);
	if (k->disk && kvdisk_writing(k->disk, m.seq)) {
		/* a write straight to disk asked again (resent after a restart
		 * of nothing but the connection): the same answer before any
		 * window, "busy" after */
		rc = kvs_reserve_disk(k, &m, &offset, eb);
		if (rc)
			return rc;
		tier = "disk";
		goto reply;
	}
	for (;;) {
		struct arena_stats st;
		uint64_t v;

		rc = arena_reserve(k->ram, &m, &offset, eb);
		if (rc != IG_E_NOSPACE)
			break;
		arena_stats(k->ram, &st);
		if (k->disk) {
			/* KV-RAM cannot take it: straight to disk */
			rc = kvs_reserve_disk(k, &m, &offset, eb);
			tier = "disk";
			break;
		}
		if (m.image_bytes > st.bytes)
			break; /* larger than the whole arena: no room to make */
		v = kvs_victim(k, m.seq, NULL, 0);
		if (!v)
			break;
		/* KV-disk off: give a moved sequence up for the newer one */
		{
			struct ig_errbuf e2;
			struct ev e;

			if (arena_drop(k->ram, v, &e2))
				break;
			k->ram_evictions++;
			if (!given_up)
				given_up = v;
			ev_begin(&e, EV_WARN, "ignis.kvstore.given_up");
			ev_u64(&e, "seq", v);
			ev_u64(&e, "for_seq", m.seq);
			ev_str(&e, "detail",
			       "KV-disk is off: that request will be prefilled again");
			ev_end(&e);
		}
	}
	if (rc == IG_E_BUSY) {
		/* the same reservation asked again (a request resent after a
		 * restart): the same answer, while nothing is committed to it */
		struct arena_info info;
		struct ig_errbuf e2;

		if (!arena_get(k->ram, m.seq, &info, k->w, ARENA_MAX_WINDOWS, &e2) &&
		    info.committed == 0 && info.meta.image_bytes == m.image_bytes &&
		    info.meta.window_bytes == m.window_bytes && info.meta.model_id == m.model_id &&
		    info.meta.kv_format == m.kv_format && info.meta.cls == m.cls) {
			offset = info.offset;
			rc = IG_E_OK;
		}
	}
	if (rc)
		return rc;
reply:
	kvs_touch(k, m.seq);
	reply->type = MSG_KV_RESERVED;
	/* where the windows go: one after the other in KV-RAM, all through the
	 * one staging window straight to disk */
	reply->u.kv_reserved = (struct msg_kv_reserved){
	    .seq = m.seq,
	    .offset = offset,
	    .stride = strcmp(tier, "disk") ? m.window_bytes : 0,
	    .windows = m.windows,
	    .given_up = given_up,
	    .tier = msg_str_of(tier),
	};
	return IG_E_OK;
}

/* A window is in place: in KV-RAM, recorded; going straight to disk,
 * copied from the staging window into KV-disk (checked on the way) first. */
static int kvs_commit(struct kvs *k, const struct msg_kv_commit *q, struct ig_errbuf *eb)
{
	struct kvs_stage *g = kvs_stage_find(k, q->seq);
	struct ev e;
	bool whole = false;
	int rc;

	if (!g || !k->disk || !kvdisk_writing(k->disk, q->seq)) {
		rc = arena_commit(k->ram, q->seq, (uint32_t)q->window, q->len, q->sum, eb);
		if (rc == IG_E_NOTFOUND && k->disk) {
			/* the last window's commit again, after the sequence went
			 * whole to disk: done already */
			struct kvdisk_seq ds;
			struct ig_errbuf e2;

			if (!kvdisk_stat(k->disk, q->seq, &ds, &e2) &&
			    q->window + 1 == ds.meta.windows)
				rc = IG_E_OK;
		}
		return rc;
	}
	if (q->len > g->bytes)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "kv_commit: seq %" PRIu64 " window %" PRIu64 ": %" PRIu64
		               " bytes; the staging window holds %" PRIu64,
		               q->seq, q->window, q->len, g->bytes);
	g->used_s = kvs_now_s();
	rc = kvdisk_wput(k->disk, q->seq, (uint32_t)q->window,
	                 (const unsigned char *)arena_base(k->ram) + g->offset, q->len, q->sum,
	                 &whole, eb);
	if (rc || !whole)
		return rc;
	kvs_stage_close(k, q->seq);
	k->direct_writes++;
	{
		struct kvdisk_seq ds;
		struct ig_errbuf e2;

		ev_begin(&e, EV_INFO, "ignis.kvstore.spilled");
		ev_u64(&e, "seq", q->seq);
		ev_str(&e, "from", "device");
		if (!kvdisk_stat(k->disk, q->seq, &ds, &e2)) {
			ev_u64(&e, "bytes", ds.meta.image_bytes);
			ev_u64(&e, "windows", ds.meta.windows);
		}
		ev_end(&e);
	}
	return IG_E_OK;
}

/* Window k of a KV-disk sequence into its staging window, checked. The
 * staging window is opened if the daemon restarted since the fetch. */
static int kvs_stage(struct kvs *k, const struct msg_kv_stage *q, struct msg *reply,
                     struct ig_errbuf *eb)
{
	struct kvdisk_seq ds;
	struct kvs_stage *g;
	uint64_t len = 0, sum = 0;
	int rc;

	if (!k->disk)
		return ig_errf(eb, IG_E_NOTFOUND, "kv_stage: seq %" PRIu64 ": KV-disk is off",
		               q->seq);
	rc = kvdisk_stat(k->disk, q->seq, &ds, eb);
	if (rc)
		return rc;
	rc = kvs_stage_open(k, &ds.meta, true, &g, eb);
	if (rc)
		return rc;
	rc = kvdisk_rwindow(k->disk, q->seq, (uint32_t)q->window,
	                    (unsigned char *)arena_base(k->ram) + g->offset, g->bytes, &len, &sum,
	                    eb);
	if (rc) {
		if (rc == IG_E_KV_LOST)
			kvs_stage_close(k, q->seq);
		return rc;
	}
	if (q->window + 1 == ds.meta.windows) {
		k->disk_reads++;
		g->done = true; /* its reader has every window now */
	}
	kvs_touch(k, q->seq);
	reply->type = MSG_KV_STAGED;
	reply->u.kv_staged = (struct msg_kv_staged){q->seq, q->window, g->offset, len, sum};
	return IG_E_OK;
}

/* The owner of a sequence's key (msg.h, kv_sweep): bits 62..32. */
static uint64_t kvs_owner(uint64_t seq)
{
	return (seq >> 32) & 0x7fffffffu;
}

/* Drop every sequence of another worker than `keep` in both tiers (and its
 * writes and reads under way): a worker's start clears what an earlier one
 * left behind. Keys without an owner are left alone. */
static void kvs_sweep(struct kvs *k, uint64_t keep)
{
	struct arena_info *ram = k->ram_scan;
	struct kvdisk_seq *disk = k->disk_scan;
	uint32_t nr = arena_list(k->ram, ram, KVS_SCAN_MAX), nd = 0;
	uint64_t n_ram = 0, n_disk = 0;
	struct ig_errbuf e2;
	struct ev e;

	for (uint32_t i = 0; i < KVS_STAGES; i++) {
		struct kvs_stage *g = &k->stages[i];
		uint64_t o = kvs_owner(g->seq);

		if (g->used && o && o != keep) {
			if (k->disk)
				(void)kvdisk_wabort(k->disk, g->seq);
			kvs_stage_close(k, g->seq);
		}
	}
	for (uint32_t i = 0; i < nr; i++) {
		uint64_t seq = ram[i].meta.seq, o = kvs_owner(seq);

		if (!(seq & KVS_STAGE_BIT) && o && o != keep && !arena_drop(k->ram, seq, &e2))
			n_ram++;
	}
	if (k->disk)
		nd = kvdisk_list(k->disk, disk, KVS_SCAN_MAX);
	for (uint32_t i = 0; i < nd; i++) {
		uint64_t seq = disk[i].meta.seq, o = kvs_owner(seq);

		if (o && o != keep && !kvdisk_drop(k->disk, seq, &e2))
			n_disk++;
	}
	ev_begin(&e, n_ram + n_disk ? EV_WARN : EV_INFO, "ignis.kvstore.swept");
	ev_u64(&e, "keep_owner", keep);
	ev_u64(&e, "ram_sequences", n_ram);
	ev_u64(&e, "disk_sequences", n_disk);
	if (n_ram + n_disk)
		ev_str(&e, "detail",
		       "an earlier worker's moved sequences: its requests ended with it");
	ev_end(&e);
}

/* Check every committed window of a KV-RAM sequence in place. */
static int kvs_check_ram(struct kvs *k, const struct arena_info *info, struct ig_errbuf *eb)
{
	const unsigned char *base = arena_base(k->ram);

	for (uint32_t i = 0; i < info->meta.windows && i < ARENA_MAX_WINDOWS; i++) {
		const struct arena_window *w = &k->w[i];

		if (!w->len) /* not committed (yet) */
			continue;
		if (kvcopy_sum(base + w->offset, w->len) != w->sum) {
			k->lost++;
			return ig_errf(eb, IG_E_KV_LOST,
			               "seq %" PRIu64
			               " window %u: the bytes in KV-RAM no longer match "
			               "their checksum",
			               info->meta.seq, i);
		}
	}
	return IG_E_OK;
}

_Static_assert(ARENA_MAX_WINDOWS == MSG_KV_WINDOWS_MAX,
               "a fetch reply carries every window's checksum of a record");

static int kvs_fetch(struct kvs *k, uint64_t seq, struct msg *reply, struct ig_errbuf *eb)
{
	struct msg_kv_seq *r = &reply->u.kv_seq;
	struct arena_info info;
	int rc = seq & KVS_STAGE_BIT ? IG_E_NOTFOUND
	                             : arena_get(k->ram, seq, &info, k->w, ARENA_MAX_WINDOWS, eb);

	if (rc == IG_E_NOTFOUND && k->disk && !kvdisk_writing(k->disk, seq)) {
		/* it stays on disk and comes back a window at a time through a
		 * staging window (kv_stage): every header checked now */
		struct kvs_stage *g;
		struct arena_meta m;

		rc = kvdisk_rsums(k->disk, seq, &m, k->sums, eb);
		if (rc == IG_E_KV_LOST)
			k->lost++;
		if (rc == IG_E_NOTFOUND)
			goto not_found;
		if (rc)
			return rc;
		rc = kvs_stage_open(k, &m, true, &g, eb);
		if (rc)
			return rc;
		kvs_touch(k, seq);
		reply->type = MSG_KV_SEQ;
		*r = (struct msg_kv_seq){.seq = seq,
		                         .tier = msg_str_of("disk"),
		                         .model_id = m.model_id,
		                         .kv_format = m.kv_format,
		                         .class = msg_str_of(kvs_class_name(m.cls)),
		                         .offset = g->offset,
		                         .stride = 0, /* every window through the staging window */
		                         .image_bytes = m.image_bytes,
		                         .window_bytes = m.window_bytes,
		                         .windows = m.windows,
		                         .committed = m.windows,
		                         .complete = true};
		r->sums.n = m.windows;
		memcpy(r->sums.v, k->sums, (size_t)m.windows * sizeof(uint64_t));
		return IG_E_OK;
	}
not_found:
	if (rc == IG_E_NOTFOUND)
		return ig_errf(eb, IG_E_NOTFOUND, "seq %" PRIu64 ": held in no tier", seq);
	if (rc)
		return rc;
	/* KV-RAM's bytes are not re-read here: the reader checks each window
	 * against its recorded checksum while copying it out (ADR 0015). */
	kvs_touch(k, seq);
	reply->type = MSG_KV_SEQ;
	*r = (struct msg_kv_seq){.seq = seq,
	                         .tier = msg_str_of("ram"),
	                         .model_id = info.meta.model_id,
	                         .kv_format = info.meta.kv_format,
	                         .class = msg_str_of(kvs_class_name(info.meta.cls)),
	                         .offset = info.offset,
	                         .stride = info.meta.window_bytes, /* one after the other */
	                         .image_bytes = info.meta.image_bytes,
	                         .window_bytes = info.meta.window_bytes,
	                         .windows = info.meta.windows,
	                         .committed = info.committed,
	                         .complete = info.complete};
	/* the recorded checksum of every window (0 for one not committed yet;
	 * windows may be committed in any order): the reader checks the bytes
	 * against them while it copies them out (ADR 0015) */
	r->sums.n = info.meta.windows < ARENA_MAX_WINDOWS ? info.meta.windows : ARENA_MAX_WINDOWS;
	for (uint32_t i = 0; i < r->sums.n; i++)
		r->sums.v[i] = k->w[i].len ? k->w[i].sum : 0;
	return IG_E_OK;
}

/* Sequences of both tiers after `after`, in seq order, up to 256. */
static int kvs_list(struct kvs *k, uint64_t after, struct msg *reply)
{
	const struct arena_info *ram = k->ram_scan;
	const struct kvdisk_seq *disk = k->disk_scan;
	struct msg_kv_list_reply *r = &reply->u.kv_list_reply;
	uint32_t nr = arena_list(k->ram, k->ram_scan, KVS_SCAN_MAX),
	         nd = k->disk ? kvdisk_list(k->disk, k->disk_scan, KVS_SCAN_MAX) : 0;
	uint64_t last = after;

	reply->type = MSG_KV_LIST_REPLY;
	r->seqs.n = 0;
	r->more = false;
	for (;;) {
		/* the next seq above `last` in either tier */
		uint64_t best = 0;
		const struct arena_info *bi = NULL;
		const struct kvdisk_seq *bd = NULL;

		for (uint32_t i = 0; i < nr; i++)
			if (!(ram[i].meta.seq & KVS_STAGE_BIT) && ram[i].meta.seq > last &&
			    (!best || ram[i].meta.seq < best)) {
				best = ram[i].meta.seq;
				bi = &ram[i];
				bd = NULL;
			}
		for (uint32_t i = 0; i < nd; i++)
			if (disk[i].meta.seq > last && (!best || disk[i].meta.seq < best)) {
				best = disk[i].meta.seq;
				bd = &disk[i];
				bi = NULL;
			}
		if (!best)
			break;
		if (r->seqs.n == 256) {
			r->more = true;
			break;
		}
		if (bi)
			r->seqs.v[r->seqs.n++] =
			    (struct msg_kv_entry){best,
			                          msg_str_of("ram"),
			                          msg_str_of(kvs_class_name(bi->meta.cls)),
			                          bi->meta.image_bytes,
			                          bi->meta.windows,
			                          bi->committed,
			                          bi->complete};
		else
			r->seqs.v[r->seqs.n++] =
			    (struct msg_kv_entry){best,
			                          msg_str_of("disk"),
			                          msg_str_of(kvs_class_name(bd->meta.cls)),
			                          bd->meta.image_bytes,
			                          bd->meta.windows,
			                          bd->meta.windows,
			                          true};
		last = best;
	}
	return IG_E_OK;
}

static void kvs_stats(struct kvs *k, struct msg *reply)
{
	struct msg_kv_stats_reply *r = &reply->u.kv_stats_reply;
	struct arena_stats as;

	reply->type = MSG_KV_STATS_REPLY;
	memset(r, 0, sizeof(*r));
	r->arena_name = msg_str_of(k->arena_name);
	if (k->ram) {
		arena_stats(k->ram, &as);
		r->ram_bytes = as.bytes;
		r->ram_used_bytes = as.used_bytes;
		r->ram_largest_free = as.largest_free;
		r->ram_sequences = as.sequences;
		r->reserves = as.reserves;
		r->commits = as.commits;
		r->refusals_full = as.refusals_full;
		r->recovered_sequences = as.recovered_sequences;
		/* index records found damaged at the start: lost like a torn
		 * KV-disk record (ignis_kv_disk_failures_total) */
		r->lost += as.damaged_sequences;
		r->slots = as.slots;
		r->slot_bytes = as.slot_bytes;
		r->slots_held = as.slots_held;
		r->slots_writing = as.slots_writing;
		r->slot_captures = as.slot_captures;
		r->slot_publishes = as.slot_publishes;
		r->slot_claims = as.slot_claims;
		r->slot_claim_misses = as.slot_claim_misses;
		r->slot_given_up = as.slot_given_up;
		r->slot_skips_busy = as.slot_skips_busy;
		r->slot_skips_duplicate = as.slot_skips_duplicate;
		r->slot_skips_size = as.slot_skips_size;
		r->slot_skips_none = as.slot_skips_none;
	}
	if (k->disk) {
		struct kvdisk_stats ds;

		kvdisk_stats(k->disk, &ds);
		r->disk_on = true;
		r->disk_ceiling_bytes = ds.ceiling_bytes;
		r->disk_used_bytes = ds.used_bytes;
		r->disk_sequences = ds.sequences;
		r->refusals_full += ds.refusals_full;
		r->lost += ds.lost;
	}
	r->demotions = k->demotions;
	r->direct_writes = k->direct_writes;
	r->disk_reads = k->disk_reads;
	r->ram_evictions = k->ram_evictions;
	r->rejected = k->svc ? k->svc->rejects.total : 0;
	r->lost += k->lost;
}

static int kvs_verify(struct kvs *k, uint64_t seq, struct ig_errbuf *eb)
{
	const struct arena_info *ram = k->ram_scan;
	uint32_t n = arena_list(k->ram, k->ram_scan, KVS_SCAN_MAX);
	uint64_t checked = 0;
	bool found = seq == 0;
	int rc;

	for (uint32_t i = 0; i < n; i++) {
		struct arena_info info;

		if (seq && ram[i].meta.seq != seq)
			continue;
		found = true;
		rc = arena_get(k->ram, ram[i].meta.seq, &info, k->w, ARENA_MAX_WINDOWS, eb);
		if (!rc)
			rc = kvs_check_ram(k, &info, eb);
		if (rc)
			return rc;
	}
	if (k->disk) {
		rc = kvdisk_verify(k->disk, seq, &checked, eb);
		if (rc == IG_E_KV_LOST)
			k->lost++;
		if (rc && rc != IG_E_NOTFOUND)
			return rc;
		found |= rc == IG_E_OK && checked > 0;
	}
	if (!found)
		return ig_errf(eb, IG_E_NOTFOUND, "seq %" PRIu64 ": held in no tier", seq);
	return IG_E_OK;
}

/* ---- retained host slots ---- */

static const char *kvs_kind_name(uint32_t kind)
{
	return kind == ARENA_CHECKPOINT ? "checkpoint" : kind == ARENA_PREFIX ? "prefix" : "";
}

static const char *kvs_slot_state_name(uint32_t state)
{
	return state == ARENA_SLOT_HELD ? "held" : state == ARENA_SLOT_WRITING ? "writing" : "free";
}

static int kvs_kind(struct msg_str s, bool any, uint32_t *out, struct ig_errbuf *eb)
{
	if (msg_str_eq(s, "checkpoint"))
		*out = ARENA_CHECKPOINT;
	else if (msg_str_eq(s, "prefix"))
		*out = ARENA_PREFIX;
	else if (any && s.n == 0)
		*out = 0;
	else
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "kind: '%.*s'; accepted: checkpoint, prefix%s", (int)s.n, s.p,
		               any ? ", or \"\" (any)" : "");
	return IG_E_OK;
}

/* An interactive slot idle past --reuse-retained-interactive-ttl ranks as
 * an agent's when one is given up (the spec's TTL; after a restart every
 * slot counts as used at the restart). */
static bool kvs_slot_idle(void *ctx, uint32_t slot)
{
	const struct kvs *k = ctx;
	uint64_t at = k->slot_touch_s[slot] ? k->slot_touch_s[slot] : k->started_s;

	return k->ttl_s && slot < ARENA_SLOTS_MAX && kvs_now_s() - at > k->ttl_s;
}

static void kvs_slot_reply(struct msg *reply, const struct arena_slot_info *in,
                           const struct arena_slot_info *up)
{
	struct msg_kv_slot *r = &reply->u.kv_slot;

	reply->type = MSG_KV_SLOT;
	*r = (struct msg_kv_slot){.slot = in->slot,
	                          .gen = in->gen,
	                          .state = msg_str_of(kvs_slot_state_name(in->state)),
	                          .kind = msg_str_of(kvs_kind_name(in->meta.kind)),
	                          .class = msg_str_of(kvs_class_name(in->meta.cls)),
	                          .key = in->meta.key,
	                          .model_id = in->meta.model_id,
	                          .tokens = in->meta.tokens,
	                          .offset = in->offset,
	                          .image_bytes = in->meta.image_bytes,
	                          .sum = in->sum,
	                          .given_up_key = up ? up->meta.key : 0,
	                          .given_up_kind =
	                              msg_str_of(up ? kvs_kind_name(up->meta.kind) : "")};
}

/* A capture never published for this long (its writer died, or lost the
 * reply and cannot know the slot) is taken back: a writing slot is never
 * given up otherwise, and its key would stay taken until a restart. A
 * writer copies one image: seconds at most. */
#define KVS_SLOT_WRITE_STALE_S 120u

static void kvs_slot_reclaim(struct kvs *k)
{
	const char *env = getenv("IGNIS_TEST_SLOT_WRITE_STALE_S");
	uint64_t stale = env ? strtoull(env, NULL, 10) : KVS_SLOT_WRITE_STALE_S, now = kvs_now_s();
	struct arena_slot_info in[64];
	struct ig_errbuf eb;
	uint32_t n;

	for (uint32_t first = 0; (n = arena_slot_list(k->ram, first, in, 64)) > 0; first += n) {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t slot = in[i].slot;
			struct ev e;

			if (in[i].state != ARENA_SLOT_WRITING || slot >= ARENA_SLOTS_MAX ||
			    now - k->slot_touch_s[slot] <= stale ||
			    arena_slot_drop(k->ram, slot, in[i].gen, &eb) != IG_E_OK)
				continue;
			ev_begin(&e, EV_WARN, "ignis.kvstore.slot_abandoned");
			ev_u64(&e, "slot", slot);
			ev_u64(&e, "key", in[i].meta.key);
			ev_u64(&e, "writing_s", now - k->slot_touch_s[slot]);
			ev_end(&e);
		}
		if (n < 64)
			break;
	}
}

static int kvs_slot_capture(struct kvs *k, const struct msg_kv_slot_capture *q, struct msg *reply,
                            struct ig_errbuf *eb)
{
	struct arena_slot_meta m = {.key = q->key,
	                            .model_id = q->model_id,
	                            .image_bytes = q->image_bytes,
	                            .tokens = (uint32_t)q->tokens};
	struct arena_slot_info in, up;
	int rc = kvs_kind(q->kind, false, &m.kind, eb);

	if (!rc)
		rc = kvs_class(q->class, &m.cls, eb);
	if (!rc) {
		kvs_slot_reclaim(k);
		rc = arena_slot_capture(k->ram, &m, kvs_slot_idle, k, &in, &up, eb);
	}
	if (rc)
		return rc;
	k->slot_touch_s[in.slot] = kvs_now_s();
	if (up.state == ARENA_SLOT_HELD) {
		struct ev e;

		ev_begin(&e, EV_INFO, "ignis.kvstore.slot_given_up");
		ev_u64(&e, "slot", up.slot);
		ev_u64(&e, "key", up.meta.key);
		ev_str(&e, "kind", kvs_kind_name(up.meta.kind));
		ev_str(&e, "class", kvs_class_name(up.meta.cls));
		ev_u64(&e, "for_key", in.meta.key);
		ev_end(&e);
	}
	kvs_slot_reply(reply, &in, up.state == ARENA_SLOT_HELD ? &up : NULL);
	return IG_E_OK;
}

static int kvs_slot_claim(struct kvs *k, const struct msg_kv_slot_claim *q, struct msg *reply,
                          struct ig_errbuf *eb)
{
	struct arena_slot_info in;
	uint32_t kind;
	int rc = kvs_kind(q->kind, true, &kind, eb);

	if (!rc)
		rc = arena_slot_claim(k->ram, q->key, q->model_id, kind, &in, eb);
	if (rc)
		return rc;
	k->slot_touch_s[in.slot] = kvs_now_s();
	kvs_slot_reply(reply, &in, NULL);
	return IG_E_OK;
}

static int kvs_slot_list(struct kvs *k, uint64_t first, struct msg *reply)
{
	const struct arena_slot_info *list = k->slot_scan;
	struct msg_kv_slot_list_reply *r = &reply->u.kv_slot_list_reply;
	uint32_t cap = KVS_SLOT_SCAN,
	         n = arena_slot_list(k->ram, (uint32_t)first, k->slot_scan, cap);

	reply->type = MSG_KV_SLOT_LIST_REPLY;
	memset(r, 0, sizeof(*r));
	for (uint32_t i = 0; i < n; i++)
		r->slots.v[i] = (struct msg_kv_slot_entry){
		    .slot = list[i].slot,
		    .state = msg_str_of(kvs_slot_state_name(list[i].state)),
		    .kind = msg_str_of(kvs_kind_name(list[i].meta.kind)),
		    .class = msg_str_of(list[i].state ? kvs_class_name(list[i].meta.cls) : ""),
		    .key = list[i].meta.key,
		    .model_id = list[i].meta.model_id,
		    .tokens = list[i].meta.tokens,
		    .image_bytes = list[i].meta.image_bytes,
		    .sum = list[i].sum,
		    .last_use = list[i].last_use};
	r->slots.n = n;
	r->more = n && first + n < k->slots;
	return IG_E_OK;
}

static int kvs_handle(void *ctx, const struct msg *req, struct msg *reply, struct ig_errbuf *eb)
{
	struct kvs *k = ctx;
	int rc;

	if (req->type == MSG_KV_CONFIG) {
		rc = kvs_configure(k, &req->u.kv_config, eb);
		goto ack;
	}
	if (req->type == MSG_KV_STATS) {
		kvs_stats(k, reply);
		return IG_E_OK;
	}
	if (!k->ram)
		return ig_errf(eb, IG_E_NOT_READY,
		               "the kvstore daemon is not configured yet (the supervisor sends "
		               "kv_config after hello): try again shortly");
	switch (req->type) {
	case MSG_KV_RESERVE:
		return kvs_reserve(k, &req->u.kv_reserve, reply, eb);
	case MSG_KV_COMMIT:
		rc = kvs_commit(k, &req->u.kv_commit, eb);
		goto ack;
	case MSG_KV_STAGE:
		return kvs_stage(k, &req->u.kv_stage, reply, eb);
	case MSG_KV_SWEEP:
		kvs_sweep(k, req->u.kv_sweep.keep_owner);
		rc = IG_E_OK;
		goto ack;
	case MSG_KV_FETCH:
		return kvs_fetch(k, req->u.kv_fetch.seq, reply, eb);
	case MSG_KV_DEMOTE:
		rc = kvs_demote(k, req->u.kv_demote.seq, eb);
		goto ack;
	case MSG_KV_DROP: {
		uint64_t seq = req->u.kv_drop.seq;
		struct ig_errbuf e2;
		bool staged = kvs_stage_find(k, seq) != NULL;
		bool ram;

		kvs_stage_close(k, seq);
		ram = arena_drop(k->ram, seq, &e2) == IG_E_OK || staged;
		bool disk = k->disk && kvdisk_drop(k->disk, seq, &e2) == IG_E_OK;

		rc = ram || disk
		         ? IG_E_OK
		         : ig_errf(eb, IG_E_NOTFOUND, "seq %" PRIu64 ": held in no tier", seq);
		goto ack;
	}
	case MSG_KV_LIST:
		return kvs_list(k, req->u.kv_list.after, reply);
	case MSG_KV_VERIFY:
		rc = kvs_verify(k, req->u.kv_verify.seq, eb);
		goto ack;
	case MSG_KV_SLOT_CAPTURE:
		return kvs_slot_capture(k, &req->u.kv_slot_capture, reply, eb);
	case MSG_KV_SLOT_PUBLISH:
		rc = arena_slot_publish(k->ram, (uint32_t)req->u.kv_slot_publish.slot,
		                        req->u.kv_slot_publish.gen, req->u.kv_slot_publish.sum, eb);
		goto ack;
	case MSG_KV_SLOT_CLAIM:
		return kvs_slot_claim(k, &req->u.kv_slot_claim, reply, eb);
	case MSG_KV_SLOT_DROP:
		rc = arena_slot_drop(k->ram, (uint32_t)req->u.kv_slot_drop.slot,
		                     req->u.kv_slot_drop.gen, eb);
		goto ack;
	case MSG_KV_SLOT_LIST:
		return kvs_slot_list(k, req->u.kv_slot_list.first, reply);
	default:
		return ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		               "the kvstore daemon does not take '%s' messages",
		               msg_type_name(req->type));
	}
ack:
	if (rc)
		return rc;
	reply->type = MSG_ACK;
	reply->u.ack.of = req->type;
	return IG_E_OK;
}

/* Background demotions, one sequence per loop turn, until the room a
 * refused reserve wanted is free (or nothing more can go); staging windows
 * left idle given back; the rate-limited warnings' summaries. */
static bool kvs_work(void *ctx, int *fatal)
{
	struct kvs *k = ctx;
	struct arena_stats st;
	struct ig_errbuf eb;
	uint64_t skip[32];
	uint32_t n_list;
	struct ev e;

	(void)fatal;
	kvs_warn_flush(&k->warn_demote, kvs_now_s());
	kvs_warn_flush(&k->warn_stage, kvs_now_s());
	if (!k->ram || !k->disk)
		return false;
	for (uint32_t i = 0; i < KVS_STAGES; i++) {
		struct kvs_stage *g = &k->stages[i];

		if (g->used && kvs_now_s() - g->used_s > KVS_STAGE_IDLE_S) {
			bool wrote = kvdisk_wabort(k->disk, g->seq);

			if (wrote || !g->done) { /* an ended read's reader had its bytes */
				ev_begin(&e, EV_WARN, "ignis.kvstore.stage_abandoned");
				ev_u64(&e, "seq", g->seq);
				ev_str(&e, "detail",
				       wrote ? "a write straight to disk stopped midway: erased"
				             : "a read from disk not finished: its staging window "
				               "freed");
				ev_end(&e);
			}
			kvs_stage_close(k, g->seq);
		}
	}
	if (!k->want_room)
		return false;
	arena_stats(k->ram, &st);
	if (st.largest_free >= k->want_room) {
		k->want_room = 0;
		return false;
	}
	/* the victims in kvs_victim's order; one that KV-disk cannot take (its
	 * ceiling) is passed over for the next without trying it */
	n_list = arena_list(k->ram, k->list, sizeof(k->list) / sizeof(k->list[0]));
	for (uint32_t n_skip = 0; n_skip < sizeof(skip) / sizeof(skip[0]); n_skip++) {
		uint64_t v = kvs_victim(k, 0, skip, n_skip);
		bool fits = false;

		if (!v)
			break;
		skip[n_skip] = v;
		for (uint32_t i = 0; i < n_list; i++)
			if (k->list[i].meta.seq == v)
				fits = kvdisk_fits(k->disk, &k->list[i].meta);
		if (!fits)
			continue;
		if (!kvs_demote(k, v, &eb))
			return true;
		if (kvs_warn_take(&k->warn_demote)) {
			ev_begin(&e, EV_WARN, k->warn_demote.event);
			ev_u64(&e, "seq", v);
			ev_str(&e, "detail", eb.msg);
			ev_end(&e);
		}
	}
	k->want_room = 0;
	return false;
}

int main(int argc, char **argv)
{
	static struct kvs k;
	const struct dmn_spec spec = {
	    .role = "kvstore",
	    .program = "ignis-kvstored",
	    .sockname = "kvstore",
	    .summary = "The Ignis KV store daemon: KV-RAM and the LMDB KV-disk tier.",
	    .ready_fields = NULL,
	    .handle = kvs_handle,
	    .ctx = &k,
	    .work = kvs_work,
	    .svc_at = &k.svc,
	};
	struct dmn_args args;
	int rc = dmn_parse_args(&spec, argc, argv, &args);

	k.warn_demote.event = "ignis.kvstore.demote_failed";
	k.warn_stage.event = "ignis.kvstore.stage_refused";

	if (rc)
		return rc > 0 ? 0 : 2;
	rc = dmn_run(&spec, &args);
	if (k.disk)
		kvdisk_close(k.disk);
	if (k.ram)
		arena_close(k.ram);
	return rc;
}
