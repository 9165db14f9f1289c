/*
 * rtdir.h - the private runtime directory where the sockets live.
 *
 * Resolution order (flag > environment > file > default): an explicit path
 * (the --runtime-dir flag), then $IGNIS_RUNTIME_DIR, then the configuration
 * file's runtime_dir, then $XDG_RUNTIME_DIR/ignis, then /tmp/ignis-$UID.
 * The directory is created with mode 0700 and must belong to the caller and
 * be reachable by nobody else: a directory that exists with wider permissions
 * or another owner is refused (the sockets inside are the system's control
 * plane). So is a symbolic link, even to a good directory (a link can be
 * pointed elsewhere), and a directory under a parent that another user could
 * replace it in: every directory above it must belong to root or to us, and
 * be writable by its group or others only when sticky (as /tmp).
 */
#ifndef IGNIS_COMMON_RTDIR_H
#define IGNIS_COMMON_RTDIR_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Longest runtime directory path: a sun_path holds 108 bytes with the socket
 * name ("/gpu-worker.sock") and the "ipc://" prefix is not part of it. */
#define RTDIR_PATH_MAX 90

/* Resolve the directory into `out` (RTDIR_PATH_MAX + 1 bytes). `flag` and
 * `file` (the configuration file's value, named `file_src` in messages) may be
 * NULL. Does not touch the file system. */
int rtdir_resolve(const char *flag, const char *file, const char *file_src, char *out, size_t cap,
                  struct ig_errbuf *eb);

/* Create `dir` (its last component only) with mode 0700, or check an
 * existing one: a directory, not a link, owned by us, not group/other
 * accessible, under parents only root or we can write (or sticky ones).
 * Refusals are IG_E_PERM (IG_E_IO when it cannot be created or inspected),
 * each naming the directory and what is accepted. */
int rtdir_prepare(const char *dir, struct ig_errbuf *eb);

#endif
