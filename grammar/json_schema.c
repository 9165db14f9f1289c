#include "json_schema.h"
int gs_compile(json_t *schema, struct grammar **out, struct ig_errbuf *eb)
{
	(void)schema;
	(void)out;
	return ig_errf(eb, IG_E_INVAL, "todo");
}
