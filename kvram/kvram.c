/*
 * kvram.c - the KV-RAM object's checks and its mapping by a client
 * (kvram.h); its layout is kvram_layout.h's.
 */
#define _GNU_SOURCE
#include "kvram.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvram_layout.h"

int kvram_name_ok(const char *name, struct ig_errbuf *eb)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > ARENA_NAME_MAX || name[0] == '.')
		return ig_errf(eb, IG_E_INVAL,
		               "KV-RAM arena name \"%s\" is not a file name under " ARENA_DIR
		               " (1-%u characters, not starting with '.')",
		               name ? name : "(null)", ARENA_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return ig_errf(eb, IG_E_INVAL,
			               "KV-RAM arena name \"%s\": only letters, digits, '-', '_' "
			               "and '.' are allowed",
			               name);
	}
	return IG_E_OK;
}

void kvram_path_of(char *path, size_t cap, const char *name)
{
	snprintf(path, cap, ARENA_DIR "/%s", name);
}

/* The object must be ours alone: a regular file, owned by us, mode 0600. */
int kvram_owner_ok(int fd, const char *path, struct stat *st, struct ig_errbuf *eb)
{
	if (fstat(fd, st) != 0)
		return ig_errf(eb, IG_E_IO, "KV-RAM arena \"%s\": fstat: %s", path,
		               strerror(errno));
	if (!S_ISREG(st->st_mode))
		return ig_errf(eb, IG_E_PERM, "KV-RAM arena \"%s\" is not a regular file", path);
	if (st->st_uid != geteuid())
		return ig_errf(eb, IG_E_PERM,
		               "KV-RAM arena \"%s\" belongs to uid %u, not to us (uid %u): "
		               "remove it or run as its owner",
		               path, (unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & 077)
		return ig_errf(eb, IG_E_PERM,
		               "KV-RAM arena \"%s\" has mode %03o: it must be owner-only (0600); "
		               "chmod 600 it or remove it",
		               path, (unsigned)(st->st_mode & 0777));
	return IG_E_OK;
}

/*
 * Check a header read from `path` against `asked` bytes (0: any size, the
 * client's case) and the object's size. The header page holds the layout,
 * which follows from the bytes and slots asked, and counters the recovery
 * takes again from the records: so when `repair` is given (the daemon, which
 * knows what it asked) and the header or the slots descriptor fails its
 * checksum on an object that is ours (magic), of this layout version and
 * exactly the size asked, *repair says what to rebuild instead of a
 * refusal. Anything else wrong is refused, naming it.
 */
int kvram_hdr_ok(const uint8_t *page, const char *path, uint64_t asked, uint32_t slots,
                  uint64_t slot_bytes, uint64_t size, const char **repair, struct ig_errbuf *eb)
{
	const struct arena_hdr *h = (const struct arena_hdr *)page;
	const struct arena_slotdesc *d = (const struct arena_slotdesc *)(page + ARENA_SLOTDESC_OFF);
	bool hdr_bad, sd_bad;
	struct layout l;

	if (repair)
		*repair = NULL;
	if (memcmp(h->magic, arena_magic, sizeof(arena_magic)) != 0)
		return ig_errf(eb, IG_E_CONFIG,
		               "\"%s\" is not an Ignis KV-RAM arena (no magic): refusing to touch "
		               "it; remove it or choose another name",
		               path);
	if (h->version != ARENA_LAYOUT_VERSION)
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\" has layout version %u, this build reads %u: "
		               "remove it (its sequences are lost) to start afresh",
		               path, h->version, ARENA_LAYOUT_VERSION);
	hdr_bad = h->check != hdr_check(h);
	sd_bad = d->check != sd_check(d);
	if (hdr_bad || sd_bad) {
		char what[160];

		if (hdr_bad)
			snprintf(what, sizeof(what),
			         "the header is corrupt (checksum %016" PRIx64
			         ", stored %016" PRIx64 ")",
			         hdr_check(h), h->check);
		else
			snprintf(what, sizeof(what),
			         "the retained slots' descriptor is corrupt (checksum %016" PRIx64
			         ", stored %016" PRIx64 ")",
			         sd_check(d), d->check);
		if (!asked || !repair)
			return ig_errf(
			    eb, IG_E_KV_LOST,
			    "KV-RAM arena \"%s\": %s; refusing to serve it: remove it to "
			    "start empty",
			    path, what);
		layout_of(asked, slots, slot_bytes, &l);
		if (size != l.map_bytes)
			return ig_errf(eb, IG_E_KV_LOST,
			               "KV-RAM arena \"%s\": %s, and the object is %" PRIu64
			               " bytes where %" PRIu64 " bytes with %u retained slots make "
			               "%" PRIu64
			               ": nothing to rebuild it from; refusing to serve it: remove "
			               "it to start empty",
			               path, what, size, asked, slots, l.map_bytes);
		*repair = hdr_bad ? "the header" : "the retained slots' descriptor";
		return IG_E_OK;
	}
	if (asked && h->asked_bytes != asked)
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\" holds %" PRIu64 " bytes, asked for %" PRIu64
		               ": set --reuse-kv-ram-bytes back to %" PRIu64
		               " or remove the arena (its sequences are lost)",
		               path, h->asked_bytes, asked, h->asked_bytes);
	if (asked && (d->count != slots || d->slot_bytes != slot_bytes))
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\" holds %u retained host slots of %" PRIu64
		               " bytes, asked for %u of %" PRIu64
		               ": set --reuse-retained-host (and the model) back, or remove the "
		               "arena (its sequences and slots are lost)",
		               path, d->count, d->slot_bytes, slots, slot_bytes);
	if (d->count > ARENA_SLOTS_MAX || d->slot_bytes > ARENA_SLOT_BYTES_MAX ||
	    (d->count == 0) != (d->slot_bytes == 0))
		return ig_errf(eb, IG_E_KV_LOST,
		               "KV-RAM arena \"%s\": %u retained slots of %" PRIu64
		               " bytes is not a layout this build writes; remove it to start empty",
		               path, d->count, d->slot_bytes);
	layout_of(h->asked_bytes, d->count, d->slot_bytes, &l);
	if (h->block != ARENA_BLOCK || h->n_blocks != l.n_blocks || h->seq_cap != l.seq_cap ||
	    h->win_cap != l.win_cap || h->seq_off != l.seq_off || h->win_off != l.win_off ||
	    h->data_off != l.data_off || h->map_bytes != l.map_bytes ||
	    d->rec_bytes != sizeof(struct arena_rslot) || d->stride != l.stride ||
	    d->srec_off != l.srec_off || d->sdata_off != l.sdata_off)
		return ig_errf(eb, IG_E_KV_LOST,
		               "KV-RAM arena \"%s\": the header's layout does not follow from its "
		               "%" PRIu64 " bytes; refusing to serve it: remove it to start empty",
		               path, h->asked_bytes);
	if (size != h->map_bytes)
		return ig_errf(eb, IG_E_KV_LOST,
		               "KV-RAM arena \"%s\" is %" PRIu64
		               " bytes long, its header says %" PRIu64
		               "; refusing to serve it: remove it to start empty",
		               path, size, h->map_bytes);
	return IG_E_OK;
}

int kvram_map_fd(int fd, uint64_t bytes, void **out, const char *path, struct ig_errbuf *eb)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);

	if (p == MAP_FAILED)
		return ig_errf(eb, IG_E_NOMEM, "KV-RAM arena \"%s\": mmap of %" PRIu64 " bytes: %s",
		               path, bytes, strerror(errno));
	*out = p;
	return IG_E_OK;
}

/* ---- the worker's side ---- */

int arena_map_open(struct arena_map *m, const char *name, struct ig_errbuf *eb)
{
	char path[sizeof(ARENA_DIR) + ARENA_NAME_MAX + 2];
	static _Thread_local uint8_t page[ARENA_HDR_BYTES];
	const struct arena_hdr *hp = (const struct arena_hdr *)page;
	struct stat st;
	void *base = NULL;
	int fd, err;

	m->base = NULL;
	m->bytes = 0;
	m->fd = -1;
	err = kvram_name_ok(name, eb);
	if (err)
		return err;
	kvram_path_of(path, sizeof(path), name);
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return ig_errf(eb,
		               errno == ENOENT                     ? IG_E_NOTFOUND
		               : errno == EACCES || errno == ELOOP ? IG_E_PERM
		                                                   : IG_E_IO,
		               "mapping KV-RAM arena \"%s\": %s%s", path, strerror(errno),
		               errno == ENOENT ? " (has the kvstore daemon started?)" : "");
	err = kvram_owner_ok(fd, path, &st, eb);
	if (err)
		goto out_close;
	memset(page, 0, sizeof(page));
	if (pread(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page)) {
		err = ig_errf(eb, IG_E_CONFIG, "\"%s\" is not an Ignis KV-RAM arena (too short)",
		              path);
		goto out_close;
	}
	err = kvram_hdr_ok(page, path, 0, 0, 0, (uint64_t)st.st_size, NULL, eb);
	if (err)
		goto out_close;
	err = kvram_map_fd(fd, hp->map_bytes, &base, path, eb);
	if (err)
		goto out_close;
	/* The whole object stays writable here, index included, though the
	 * client writes data only: the worker registers the mapping for DMA
	 * (cudaHostRegister pins for writing and refuses read-only pages). */
	m->base = base;
	m->bytes = hp->map_bytes;
	m->fd = fd;
	return IG_E_OK;

out_close:
	close(fd);
	return err;
}

void arena_map_close(struct arena_map *m)
{
	if (!m || !m->base)
		return;
	munmap(m->base, m->bytes);
	if (m->fd >= 0)
		close(m->fd);
	m->base = NULL;
	m->bytes = 0;
	m->fd = -1;
}

int arena_map_slot(const struct arena_map *m, uint32_t slot, struct arena_slot_info *out,
                   struct ig_errbuf *eb)
{
	const struct arena_slotdesc *d;
	const struct arena_rslot *r;
	struct arena_rslot copy;
	uint32_t state;

	if (!m->base)
		return ig_errf(eb, IG_E_INVAL, "KV-RAM: no arena is mapped");
	d = (const struct arena_slotdesc *)((const uint8_t *)m->base + ARENA_SLOTDESC_OFF);
	if (slot >= d->count)
		return ig_errf(eb, IG_E_NOTFOUND, "retained slot %u: the arena has %u", slot,
		               d->count);
	if (d->srec_off + (uint64_t)d->count * sizeof(*r) > m->bytes ||
	    d->sdata_off + (uint64_t)d->count * d->stride > m->bytes)
		return ig_errf(eb, IG_E_KV_LOST,
		               "KV-RAM: the retained slots are outside the mapping");
	r = (const struct arena_rslot *)((const uint8_t *)m->base + d->srec_off) + slot;
	memset(out, 0, sizeof(*out));
	out->slot = slot;
	out->offset = d->sdata_off + (uint64_t)slot * d->stride;
	state = atomic_load_explicit(&r->state, memory_order_acquire);
	memcpy(&copy, (const void *)r, sizeof(copy));
	atomic_thread_fence(memory_order_acquire);
	if (state == ARENA_SLOT_FREE || copy.check != rslot_check(&copy) ||
	    atomic_load_explicit(&r->state, memory_order_acquire) != state)
		return IG_E_OK; /* free, or changing under us: not to be trusted */
	out->state = state;
	out->meta = (struct arena_slot_meta){.key = copy.key,
	                                     .model_id = copy.model_id,
	                                     .image_bytes = copy.image_bytes,
	                                     .kind = copy.kind,
	                                     .cls = copy.cls,
	                                     .tokens = copy.tokens};
	out->gen = copy.gen;
	out->sum = state == ARENA_SLOT_HELD ? copy.sum : 0;
	out->last_use = copy.last_use;
	return IG_E_OK;
}
