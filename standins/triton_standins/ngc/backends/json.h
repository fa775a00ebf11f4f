/* A small JSON tree, enough to read a model configuration and write a completed one back:
 * the server hands configurations over as JSON (TRITONSERVER_Message). */
#ifndef COMPOSER_JSON_H
#define COMPOSER_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { JSON_NULL, JSON_TRUE, JSON_FALSE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_kind;

typedef struct json {
  json_kind kind;
  char* key;          /* the member's name inside an object, else NULL */
  char* text;         /* a string's value or a number's literal (kept as written) */
  struct json* child; /* first element or member */
  struct json* next;  /* next sibling */
} json;

json* json_parse(const char* text, size_t size); /* NULL when it is not JSON */
void json_free(json* value);
json* json_get(const json* object, const char* key); /* NULL when absent */
/* A number, or a string holding one (protobuf's JSON writes int64 as strings). */
int json_int(const json* value, int64_t* out);
const char* json_str(const json* value); /* NULL unless a string */
int json_count(const json* array);       /* elements of an array, 0 otherwise */

json* json_new(json_kind kind, const char* text); /* NULL when out of memory */
json* json_new_int(int64_t number);
/* Puts `value` under `key`, replacing any member of that name; takes ownership. */
int json_set(json* object, const char* key, json* value);
int json_append(json* array, json* value); /* takes ownership */
char* json_write(const json* value);      /* malloc'd compact text, NULL when out of memory */

#ifdef __cplusplus
}
#endif

#endif
