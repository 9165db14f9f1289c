/*
 * kvdrig.h - a real kvstore daemon for the engine's tests: ignis-kvstored
 * ($IGNIS_KVSTORED) started in a private runtime directory and configured
 * as the supervisor would (kv_config: an arena of its own under /dev/shm,
 * KV-disk at <dir>/disk when asked). Include after <cmocka.h>.
 */
#ifndef IGNIS_TESTS_KVDRIG_H
#define IGNIS_TESTS_KVDRIG_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nng/nng.h>

#include "kvstore-daemon/arena.h"
#include "proto/msg.h"
#include "proto/transport.h"

struct daemon {
	char dir[64], arena[64], disk[96];
	const char *bin;
	pid_t pid;
	uint64_t arena_bytes;
	uint64_t disk_bytes; /* KV-disk's ceiling; 0: off */
	/* retained host slots (kv_config's retained_slots, slot_bytes) and the
	 * interactive TTL; set before daemon_configure */
	uint32_t slots;
	uint64_t slot_bytes, ttl_s;
};

static inline void daemon_start(struct daemon *k)
{
	char parent[16];
	pid_t pid;

	snprintf(parent, sizeof(parent), "%d", (int)getpid());
	pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char log[96];
		int fd;

		snprintf(log, sizeof(log), "%s/kvstored.log", k->dir);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* a small KV-disk ceiling, whatever the free space of the CI
		 * volume (the daemon's test-only switch) */
		if (k->disk_bytes)
			setenv("IGNIS_TEST_KVDISK_IGNORE_VOLUME", "1", 1);
		/* it exits when this test does, even one that failed midway */
		execl(k->bin, k->bin, "--runtime-dir", k->dir, "--supervisor-pid", parent,
		      (char *)NULL);
		_exit(127);
	}
	k->pid = pid;
}

static inline void daemon_configure(struct daemon *k)
{
	struct msg q = {.type = MSG_KV_CONFIG};
	struct ig_errbuf eb = {0};
	struct tp_rx rx;
	nng_socket s;

	assert_int_equal(tp_dial(&s, k->dir, "kvstore", 10000, &eb), IG_E_OK);
	q.u.kv_config = (struct msg_kv_config){.arena_name = msg_str_of(k->arena),
	                                       .arena_bytes = k->arena_bytes,
	                                       .disk_path = msg_str_of(k->disk),
	                                       .disk_bytes = k->disk_bytes,
	                                       .interactive_ttl_s = k->ttl_s,
	                                       .retained_slots = k->slots,
	                                       .slot_bytes = k->slots ? k->slot_bytes : 0};
	if (tp_call(s, &q, &rx, &eb))
		fail_msg("kv_config: %s", eb.msg);
	tp_rx_release(&rx);
	nng_close(s);
}

static inline void daemon_stop(struct daemon *k, int sig)
{
	int status;

	if (!k->pid)
		return;
	kill(k->pid, sig);
	waitpid(k->pid, &status, 0);
	k->pid = 0;
}

/* A fresh daemon named after `tag`, this process and a counter; with
 * `slots` retained host slots of `slot_bytes` (0, 0: none). */
static inline void daemon_open_slots(struct daemon *k, const char *tag, uint64_t arena_bytes,
                                     uint64_t disk_bytes, uint32_t slots, uint64_t slot_bytes,
                                     uint64_t ttl_s)
{
	static unsigned n;

	memset(k, 0, sizeof(*k));
	k->bin = getenv("IGNIS_KVSTORED");
	if (!k->bin || access(k->bin, X_OK) != 0)
		fail_msg("IGNIS_KVSTORED=%s: not an executable ignis-kvstored",
		         k->bin ? k->bin : "(unset)");
	snprintf(k->dir, sizeof(k->dir), "/tmp/ignis-%s-%d-%u", tag, (int)getpid(), n);
	snprintf(k->arena, sizeof(k->arena), "ignis-test-%s-%d-%u", tag, (int)getpid(), n++);
	mkdir(k->dir, 0700);
	(void)arena_unlink(k->arena, NULL);
	k->arena_bytes = arena_bytes;
	k->disk_bytes = disk_bytes;
	if (disk_bytes)
		snprintf(k->disk, sizeof(k->disk), "%s/disk", k->dir);
	k->slots = slots;
	k->slot_bytes = slot_bytes;
	k->ttl_s = ttl_s;
	daemon_start(k);
	daemon_configure(k);
}

static inline void daemon_open(struct daemon *k, const char *tag, uint64_t arena_bytes,
                               uint64_t disk_bytes)
{
	daemon_open_slots(k, tag, arena_bytes, disk_bytes, 0, 0, 0);
}

static inline void daemon_close(struct daemon *k)
{
	char cmd[160];

	daemon_stop(k, SIGTERM);
	(void)arena_unlink(k->arena, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", k->dir);
	if (k->dir[0] && system(cmd) != 0)
		print_message("# could not remove %s\n", k->dir);
	k->dir[0] = '\0';
}

#endif
