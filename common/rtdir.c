/* rtdir.c - runtime directory resolution and checks (see rtdir.h). */
#include "rtdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The promise of RTDIR_PATH_MAX: the longest directory and the longest
 * socket name ("/gpu-worker.sock", as long as "/supervisor.sock") fit a
 * sun_path with its NUL. */
_Static_assert(RTDIR_PATH_MAX + sizeof("/gpu-worker.sock") <=
                   sizeof(((struct sockaddr_un *)0)->sun_path),
               "RTDIR_PATH_MAX leaves no room for the sockets' names in a sun_path");

int rtdir_resolve(const char *flag, const char *file, const char *file_src, char *out, size_t cap,
                  struct ig_errbuf *eb)
{
	const char *env = getenv("IGNIS_RUNTIME_DIR");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	const char *src;
	int n;

	if (flag && *flag) {
		n = snprintf(out, cap, "%s", flag);
		src = "--runtime-dir";
	} else if (env && *env) {
		n = snprintf(out, cap, "%s", env);
		src = "IGNIS_RUNTIME_DIR";
	} else if (file && *file) {
		n = snprintf(out, cap, "%s", file);
		src = file_src ? file_src : "the configuration file";
	} else if (xdg && *xdg) {
		n = snprintf(out, cap, "%s/ignis", xdg);
		src = "XDG_RUNTIME_DIR";
	} else {
		n = snprintf(out, cap, "/tmp/ignis-%u", (unsigned)getuid());
		src = "the default";
	}
	if (n < 0 || (size_t)n >= cap || n > RTDIR_PATH_MAX)
		return ig_errf(eb, IG_E_CONFIG,
		               "runtime directory from %s is too long (%d bytes); socket paths "
		               "must fit in %d bytes: choose a shorter --runtime-dir",
		               src, n, RTDIR_PATH_MAX);
	if (out[0] != '/')
		return ig_errf(eb, IG_E_CONFIG,
		               "runtime directory '%s' from %s is not an absolute path", out, src);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	return IG_E_OK;
}

/* Who may replace entries of a directory: its owner, unless root or us, and
 * anyone its group or other bits let write, unless it is sticky (then only
 * an entry's owner may, as in /tmp). */
static int rtdir__safe_parent(const char *dir, const char *p, const struct stat *st,
                              struct ig_errbuf *eb)
{
	uid_t me = getuid();

	if (st->st_uid != 0 && st->st_uid != me)
		return ig_errf(
		    eb, IG_E_PERM,
		    "runtime directory '%s': '%s' belongs to uid %u, neither root nor us "
		    "(uid %u), so that user could replace the directory; accepted: a "
		    "directory under parents that only root or uid %u can write (sticky "
		    "ones, as /tmp, included); choose another --runtime-dir",
		    dir, p, (unsigned)st->st_uid, (unsigned)me, (unsigned)me);
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return ig_errf(
		    eb, IG_E_PERM,
		    "runtime directory '%s': '%s' (mode %o) can be written by others and "
		    "is not sticky, so another user could replace the directory; "
		    "accepted: a directory under parents that only root or uid %u can "
		    "write (sticky ones, as /tmp, included); choose another "
		    "--runtime-dir",
		    dir, p, (unsigned)(st->st_mode & 07777), (unsigned)me);
	return IG_E_OK;
}

/* Every existing directory above `dir`, up to "/". One that is a link is
 * judged as a link (its owner) and by the directory it leads to; the
 * directories above that one are not walked again. A missing one is left to
 * mkdir's account. */
static int rtdir__check_parents(const char *dir, struct ig_errbuf *eb)
{
	char p[RTDIR_PATH_MAX + 2];
	struct stat st;
	char *slash;
	int rc;

	if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
		return ig_errf(eb, IG_E_CONFIG, "runtime directory '%s' is too long", dir);
	while ((slash = strrchr(p, '/')) != NULL) {
		if (slash == p)
			slash[1] = '\0'; /* "/" itself, last */
		else
			*slash = '\0';
		if (lstat(p, &st) == 0) {
			if (S_ISLNK(st.st_mode)) {
				rc = rtdir__safe_parent(dir, p, &st, eb);
				if (!rc && stat(p, &st) == 0)
					rc = rtdir__safe_parent(dir, p, &st, eb);
			} else {
				rc = rtdir__safe_parent(dir, p, &st, eb);
			}
			if (rc)
				return rc;
		}
		if (slash == p)
			break;
	}
	return IG_E_OK;
}

int rtdir_prepare(const char *dir, struct ig_errbuf *eb)
{
	struct stat st;
	int rc;

	rc = rtdir__check_parents(dir, eb);
	if (rc)
		return rc;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return ig_errf(eb, IG_E_IO, "cannot create runtime directory '%s': %s", dir,
		               strerror(errno));
	if (lstat(dir, &st) != 0)
		return ig_errf(eb, IG_E_IO, "cannot inspect runtime directory '%s': %s", dir,
		               strerror(errno));
	if (S_ISLNK(st.st_mode)) {
		char to[RTDIR_PATH_MAX * 4];
		ssize_t n = readlink(dir, to, sizeof(to) - 1);

		to[n > 0 ? n : 0] = '\0';
		return ig_errf(eb, IG_E_PERM,
		               "runtime directory '%s' is a symbolic link (to '%s'); accepted: a "
		               "directory itself, not a link (a link can be pointed elsewhere): "
		               "name the directory it leads to, or remove the link",
		               dir, to);
	}
	if (!S_ISDIR(st.st_mode))
		return ig_errf(eb, IG_E_PERM,
		               "runtime directory '%s' exists but is not a directory; accepted: a "
		               "directory (created when missing)",
		               dir);
	if (st.st_uid != getuid())
		return ig_errf(
		    eb, IG_E_PERM,
		    "runtime directory '%s' belongs to uid %u, not to us (uid %u); choose "
		    "another --runtime-dir",
		    dir, (unsigned)st.st_uid, (unsigned)getuid());
	if ((st.st_mode & 077) != 0)
		return ig_errf(eb, IG_E_PERM,
		               "runtime directory '%s' has mode %03o; it must be 0700 (chmod 700 "
		               "'%s')",
		               dir, (unsigned)(st.st_mode & 0777), dir);
	return IG_E_OK;
}
