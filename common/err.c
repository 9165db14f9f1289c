/* err.c - names, descriptions and message formatting for the error table. */
#include "err.h"

#include <stdio.h>
#include <string.h>

const char *ig_err_name(int code)
{
	switch (code) {
#define IG__ERR_NAME(name, val, desc)                                                              \
	case val:                                                                                  \
		return "IG_E_" #name;
		IG_ERRORS(IG__ERR_NAME)
#undef IG__ERR_NAME
	}
	return "IG_E_UNKNOWN";
}

const char *ig_err_str(int code)
{
	switch (code) {
#define IG__ERR_STR(name, val, desc)                                                               \
	case val:                                                                                  \
		return desc;
		IG_ERRORS(IG__ERR_STR)
#undef IG__ERR_STR
	}
	return "unknown error";
}

int ig_err_known(int code)
{
	switch (code) {
#define IG__ERR_KNOWN(name, val, desc) case val:
		IG_ERRORS(IG__ERR_KNOWN)
#undef IG__ERR_KNOWN
		return 1;
	}
	return 0;
}

int ig_verrf(struct ig_errbuf *eb, int code, const char *fmt, va_list ap)
{
	if (eb) {
		eb->code = code;
		vsnprintf(eb->msg, sizeof(eb->msg), fmt, ap);
	}
	return code;
}

int ig_errf(struct ig_errbuf *eb, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ig_verrf(eb, code, fmt, ap);
	va_end(ap);
	return code;
}

int ig_errprefix(struct ig_errbuf *eb, const char *fmt, ...)
{
	char head[256], old[sizeof(eb->msg)];
	va_list ap;

	if (!eb)
		return 0;
	va_start(ap, fmt);
	vsnprintf(head, sizeof(head), fmt, ap);
	va_end(ap);
	memcpy(old, eb->msg, sizeof(old));
	snprintf(eb->msg, sizeof(eb->msg), "%s: %s", head, old);
	return eb->code;
}

void ig_errclear(struct ig_errbuf *eb)
{
	if (eb) {
		eb->code = 0;
		eb->msg[0] = '\0';
	}
}
