/* libidentity_config.so: reads tensor names from a model configuration in JSON.
 * Bundled in the backend's folder and found through the backend's RUNPATH ($ORIGIN). */
#ifndef COMPOSER_IDENTITY_CONFIG_H
#define COMPOSER_IDENTITY_CONFIG_H

#include <stddef.h>

#define IDCFG_EXPORT __attribute__((visibility("default")))

/* The "name" of every entry of the array `section` ("input", "output") of the top-level
 * object, in order. Returns how many (0 when the section is absent) and sets *names to a
 * malloc'd array of malloc'd strings; -1 when the JSON is malformed or memory runs out. */
IDCFG_EXPORT int idcfg_tensor_names(const char* json, size_t size, const char* section, char*** names);
IDCFG_EXPORT void idcfg_free_names(char** names, int count);

#endif
