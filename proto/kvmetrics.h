/*
 * kvmetrics.h - the kvstore daemon's figures as Prometheus metrics, under
 * the reference engine's names (docs/design.md, section 1), declared once:
 * `ignis-kvstore-ctl stats --prom` prints them and the supervisor's metrics
 * page (issue 6) serves the same table.
 */
#ifndef IGNIS_PROTO_KVMETRICS_H
#define IGNIS_PROTO_KVMETRICS_H

#include <stdio.h>

#include "msg.h"

/* X(family, type, label, value, field, help): one sample per row; rows of a
 * family are consecutive. `label` "" for none, else `name="value"`. */
#define KVM_ROWS(X)                                                                                \
	X(ignis_kv_ram_arena_bytes, gauge, "state=\"used\"", ram_used_bytes,                       \
	  "KV-RAM arena bytes by state.")                                                          \
	X(ignis_kv_ram_arena_bytes, gauge, "state=\"free\"", ram_free_bytes,                       \
	  "KV-RAM arena bytes by state.")                                                          \
	X(ignis_kv_ram_evictions_total, counter, "", ram_evictions,                                \
	  "Moved sequences KV-RAM gave up (each is prefilled again): with KV-disk off, or with "   \
	  "both tiers full, for a read from KV-disk.")                                             \
	X(ignis_kv_disk_bytes, gauge, "state=\"used\"", disk_used_bytes,                           \
	  "KV-disk bytes: used, and the effective ceiling.")                                       \
	X(ignis_kv_disk_bytes, gauge, "state=\"ceiling\"", disk_ceiling_bytes,                     \
	  "KV-disk bytes: used, and the effective ceiling.")                                       \
	X(ignis_kv_disk_spills_total, counter, "from=\"ram\"", demotions,                          \
	  "Sequences written to KV-disk, by where they came from.")                                \
	X(ignis_kv_disk_spills_total, counter, "from=\"device\"", direct_writes,                   \
	  "Sequences written to KV-disk, by where they came from.")                                \
	X(ignis_kv_disk_failures_total, counter, "op=\"read\"", lost,                              \
	  "KV-disk and KV-RAM records found torn, corrupt or foreign (never served).")             \
	X(ignis_kv_tier_sequences, gauge, "tier=\"ram\"", ram_sequences,                           \
	  "Sequences held, by tier.")                                                              \
	X(ignis_kv_tier_sequences, gauge, "tier=\"disk\"", disk_sequences,                         \
	  "Sequences held, by tier.")                                                              \
	X(ignis_kv_tier_refusals_total, counter, "", refusals_full,                                \
	  "Reservations and demotions refused at once because the tier was full.")                 \
	X(ignis_retained_slots, gauge, "tier=\"host\",state=\"free\"", slots_free,                 \
	  "Retained slots by tier and state (writing: a capture in progress).")                    \
	X(ignis_retained_slots, gauge, "tier=\"host\",state=\"writing\"", slots_writing,           \
	  "Retained slots by tier and state (writing: a capture in progress).")                    \
	X(ignis_retained_slots, gauge, "tier=\"host\",state=\"held\"", slots_held,                 \
	  "Retained slots by tier and state (writing: a capture in progress).")                    \
	X(ignis_retained_slot_skips_total, counter, "reason=\"busy\"", slot_skips_busy,            \
	  "Captures skipped: every slot being written (busy), the key already held "               \
	  "(duplicate), an image larger than a slot (size), no slots (none).")                     \
	X(ignis_retained_slot_skips_total, counter, "reason=\"duplicate\"", slot_skips_duplicate,  \
	  "Captures skipped: every slot being written (busy), the key already held "               \
	  "(duplicate), an image larger than a slot (size), no slots (none).")                     \
	X(ignis_retained_slot_skips_total, counter, "reason=\"size\"", slot_skips_size,            \
	  "Captures skipped: every slot being written (busy), the key already held "               \
	  "(duplicate), an image larger than a slot (size), no slots (none).")                     \
	X(ignis_retained_slot_skips_total, counter, "reason=\"none\"", slot_skips_none,            \
	  "Captures skipped: every slot being written (busy), the key already held "               \
	  "(duplicate), an image larger than a slot (size), no slots (none).")                     \
	X(ignis_retained_slot_given_up_total, counter, "tier=\"host\"", slot_given_up,             \
	  "Held retained slots given up for a newer capture.")                                     \
	X(ignis_retained_slot_claims_total, counter, "tier=\"host\",result=\"hit\"", slot_claims,  \
	  "Claims of a retained slot: found (hit) or not (miss).")                                 \
	X(ignis_retained_slot_claims_total, counter, "tier=\"host\",result=\"miss\"",              \
	  slot_claim_misses, "Claims of a retained slot: found (hit) or not (miss).")

/* Print the rows for one stats reply in the Prometheus text format (HELP and
 * TYPE once per family). */
void kvm_write_prom(FILE *f, const struct msg_kv_stats_reply *r);

#endif
