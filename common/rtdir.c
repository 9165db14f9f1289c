/* rtdir.c - runtime directory resolution and checks (see rtdir.h). */
#include "rtdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int rtdir_prepare(const char *dir, struct ig_errbuf *eb)
{
	struct stat st;

	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return ig_errf(eb, IG_E_IO, "cannot create runtime directory '%s': %s", dir,
		               strerror(errno));
	if (lstat(dir, &st) != 0)
		return ig_errf(eb, IG_E_IO, "cannot inspect runtime directory '%s': %s", dir,
		               strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return ig_errf(eb, IG_E_PERM,
		               "runtime directory '%s' exists but is not a directory", dir);
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

int rtdir_path(const char *dir, const char *name, char *out, size_t cap, struct ig_errbuf *eb)
{
	int n = snprintf(out, cap, "%s/%s", dir, name);

	if (n < 0 || (size_t)n >= cap)
		return ig_errf(eb, IG_E_CONFIG, "path '%s/%s' is too long", dir, name);
	return IG_E_OK;
}
