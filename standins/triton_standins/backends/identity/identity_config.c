/* A small JSON reader, just enough to walk a model configuration: objects, arrays,
 * strings (with escapes), numbers and literals; nesting is bounded. */
#include "identity_config.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
  const char* p;
  const char* end;
} cursor;

static void skip_space(cursor* c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int expect(cursor* c, char ch) {
  skip_space(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

static int hex4(const char* p, unsigned* out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char h = p[i];
    v <<= 4;
    if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
    else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
    else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

/* Reads a string; when `out` is given, stores a malloc'd, decoded copy (UTF-8). */
static int read_string(cursor* c, char** out) {
  skip_space(c);
  if (c->p >= c->end || *c->p != '"') return 0;
  c->p++;
  char* text = NULL;
  size_t len = 0;
  if (out) {
    text = malloc((size_t)(c->end - c->p) + 1);
    if (!text) return 0;
  }
  while (c->p < c->end && *c->p != '"') {
    unsigned ch = (unsigned char)*c->p++;
    if (ch == '\\') {
      if (c->p >= c->end) break;
      char e = *c->p++;
      switch (e) {
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u':
          if (c->end - c->p < 4 || !hex4(c->p, &ch)) goto bad;
          c->p += 4;
          break;
        default: ch = (unsigned char)e; break; /* \" \\ \/ */
      }
    }
    if (text) { /* escapes above U+007F become UTF-8; surrogate halves are kept as is */
      if (ch < 0x80) text[len++] = (char)ch;
      else if (ch < 0x800) { text[len++] = (char)(0xC0 | (ch >> 6)); text[len++] = (char)(0x80 | (ch & 0x3F)); }
      else {
        text[len++] = (char)(0xE0 | (ch >> 12));
        text[len++] = (char)(0x80 | ((ch >> 6) & 0x3F));
        text[len++] = (char)(0x80 | (ch & 0x3F));
      }
    }
  }
  if (c->p >= c->end) goto bad;
  c->p++; /* closing quote */
  if (out) {
    text[len] = '\0';
    *out = text;
  }
  return 1;
bad:
  free(text);
  return 0;
}

static int skip_value(cursor* c, int depth);

static int skip_container(cursor* c, int depth, char close, int keyed) {
  if (depth > MAX_DEPTH) return 0;
  if (expect(c, close)) return 1;
  do {
    if (keyed && (!read_string(c, NULL) || !expect(c, ':'))) return 0;
    if (!skip_value(c, depth + 1)) return 0;
  } while (expect(c, ','));
  return expect(c, close);
}

static int skip_value(cursor* c, int depth) {
  skip_space(c);
  if (c->p >= c->end) return 0;
  char ch = *c->p;
  if (ch == '"') return read_string(c, NULL);
  if (ch == '{') { c->p++; return skip_container(c, depth, '}', 1); }
  if (ch == '[') { c->p++; return skip_container(c, depth, ']', 0); }
  const char* start = c->p; /* numbers and literals: a run of their characters */
  while (c->p < c->end && strchr("0123456789+-.eEtruefalsn", *c->p)) c->p++;
  return c->p > start;
}

/* One entry of the section: an object whose "name" is appended to the list. */
static int read_entry(cursor* c, char*** names, int* count) {
  if (!expect(c, '{')) return 0;
  char* name = NULL;
  if (!expect(c, '}')) {
    do {
      char* key = NULL;
      if (!read_string(c, &key) || !expect(c, ':')) { free(key); free(name); return 0; }
      int is_name = strcmp(key, "name") == 0 && !name;
      free(key);
      if (is_name ? !read_string(c, &name) : !skip_value(c, 1)) { free(name); return 0; }
    } while (expect(c, ','));
    if (!expect(c, '}')) { free(name); return 0; }
  }
  if (!name) name = calloc(1, 1); /* an entry without a name: the server rejects it anyway */
  char** grown = name ? realloc(*names, sizeof(char*) * (size_t)(*count + 1)) : NULL;
  if (!grown) { free(name); return 0; }
  *names = grown;
  (*names)[(*count)++] = name;
  return 1;
}

int idcfg_tensor_names(const char* json, size_t size, const char* section, char*** names) {
  cursor c = {json, json + size};
  char** list = NULL;
  int count = 0, found = 0;
  if (!expect(&c, '{')) return -1;
  if (!expect(&c, '}')) {
    do {
      char* key = NULL;
      if (!read_string(&c, &key) || !expect(&c, ':')) { free(key); goto bad; }
      int wanted = !found && strcmp(key, section) == 0;
      free(key);
      if (wanted) {
        found = 1;
        if (!expect(&c, '[')) goto bad;
        if (!expect(&c, ']')) {
          do {
            if (!read_entry(&c, &list, &count)) goto bad;
          } while (expect(&c, ','));
          if (!expect(&c, ']')) goto bad;
        }
      } else if (!skip_value(&c, 1)) {
        goto bad;
      }
    } while (expect(&c, ','));
    if (!expect(&c, '}')) goto bad;
  }
  *names = list;
  return count;
bad:
  idcfg_free_names(list, count);
  return -1;
}

void idcfg_free_names(char** names, int count) {
  for (int i = 0; i < count; i++) free(names[i]);
  free(names);
}
