/* See json.h. Nesting is bounded so a hostile file cannot exhaust the stack. */
#include "json.h"

#include <inttypes.h>
#include <stdio.h>
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

static int take(cursor* c, char ch) {
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

/* A decoded, malloc'd copy of the string at the cursor (escapes become UTF-8). */
static char* read_string(cursor* c) {
  if (!take(c, '"')) return NULL;
  char* text = malloc((size_t)(c->end - c->p) * 2 + 1);
  size_t len = 0;
  if (!text) return NULL;
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
      if (ch >= 0x80) { /* only \u escapes get here: write them as UTF-8 */
        if (ch < 0x800) {
          text[len++] = (char)(0xC0 | (ch >> 6));
        } else {
          text[len++] = (char)(0xE0 | (ch >> 12));
          text[len++] = (char)(0x80 | ((ch >> 6) & 0x3F));
        }
        ch = 0x80 | (ch & 0x3F);
      }
    }
    text[len++] = (char)ch;
  }
  if (c->p >= c->end) goto bad;
  c->p++;
  text[len] = '\0';
  return text;
bad:
  free(text);
  return NULL;
}

static json* parse_value(cursor* c, int depth);

/* Elements of an array, or members of an object (keyed), up to the closing character. */
static json* parse_container(cursor* c, int depth, json_kind kind, char close) {
  json* node = json_new(kind, NULL);
  if (!node) return NULL;
  if (take(c, close)) return node;
  json** tail = &node->child;
  do {
    char* key = NULL;
    if (kind == JSON_OBJECT && (!(key = read_string(c)) || !take(c, ':'))) {
      free(key);
      goto bad;
    }
    json* item = parse_value(c, depth + 1);
    if (!item) {
      free(key);
      goto bad;
    }
    item->key = key;
    *tail = item;
    tail = &item->next;
  } while (take(c, ','));
  if (take(c, close)) return node;
bad:
  json_free(node);
  return NULL;
}

static json* parse_value(cursor* c, int depth) {
  if (depth > MAX_DEPTH) return NULL;
  skip_space(c);
  if (c->p >= c->end) return NULL;
  char ch = *c->p;
  if (ch == '{') { c->p++; return parse_container(c, depth, JSON_OBJECT, '}'); }
  if (ch == '[') { c->p++; return parse_container(c, depth, JSON_ARRAY, ']'); }
  if (ch == '"') {
    char* text = read_string(c);
    json* node = text ? json_new(JSON_STRING, NULL) : NULL;
    if (node) node->text = text;
    else free(text);
    return node;
  }
  static const struct { const char* word; json_kind kind; } words[] = {
      {"true", JSON_TRUE}, {"false", JSON_FALSE}, {"null", JSON_NULL}};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t n = strlen(words[i].word);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, words[i].word, n) == 0) {
      c->p += n;
      return json_new(words[i].kind, NULL);
    }
  }
  const char* start = c->p;
  while (c->p < c->end && strchr("0123456789+-.eE", *c->p)) c->p++;
  if (c->p == start) return NULL;
  char literal[64];
  size_t n = (size_t)(c->p - start);
  if (n >= sizeof literal) return NULL;
  memcpy(literal, start, n);
  literal[n] = '\0';
  return json_new(JSON_NUMBER, literal);
}

json* json_parse(const char* text, size_t size) {
  cursor c = {text, text + size};
  json* value = parse_value(&c, 0);
  skip_space(&c);
  if (value && c.p != c.end) {
    json_free(value);
    return NULL;
  }
  return value;
}

void json_free(json* value) {
  while (value) {
    json* next = value->next;
    json_free(value->child);
    free(value->key);
    free(value->text);
    free(value);
    value = next;
  }
}

json* json_get(const json* object, const char* key) {
  if (!object || object->kind != JSON_OBJECT) return NULL;
  for (json* m = object->child; m; m = m->next)
    if (m->key && strcmp(m->key, key) == 0) return m;
  return NULL;
}

int json_int(const json* value, int64_t* out) {
  if (!value || (value->kind != JSON_NUMBER && value->kind != JSON_STRING) || !value->text) return 0;
  char* end = NULL;
  long long n = strtoll(value->text, &end, 10);
  if (end == value->text || *end) return 0;
  *out = (int64_t)n;
  return 1;
}

const char* json_str(const json* value) { return value && value->kind == JSON_STRING ? value->text : NULL; }

int json_count(const json* array) {
  int n = 0;
  if (array && array->kind == JSON_ARRAY)
    for (json* e = array->child; e; e = e->next) n++;
  return n;
}

json* json_new(json_kind kind, const char* text) {
  json* node = calloc(1, sizeof *node);
  if (!node) return NULL;
  node->kind = kind;
  if (text && !(node->text = strdup(text))) {
    free(node);
    return NULL;
  }
  return node;
}

json* json_new_int(int64_t number) {
  char literal[32];
  snprintf(literal, sizeof literal, "%" PRId64, number);
  return json_new(JSON_NUMBER, literal);
}

int json_set(json* object, const char* key, json* value) {
  if (!object || !value || object->kind != JSON_OBJECT || !(value->key = strdup(key))) {
    json_free(value);
    return 0;
  }
  json** link = &object->child;
  while (*link && strcmp((*link)->key, key) != 0) link = &(*link)->next;
  if (*link) { /* replace in place, keeping the member order */
    value->next = (*link)->next;
    (*link)->next = NULL;
    json_free(*link);
  }
  *link = value;
  return 1;
}

int json_append(json* array, json* value) {
  if (!array || !value || array->kind != JSON_ARRAY) {
    json_free(value);
    return 0;
  }
  json** link = &array->child;
  while (*link) link = &(*link)->next;
  *link = value;
  return 1;
}

typedef struct {
  char* text;
  size_t len, cap;
  int failed;
} sink;

static void put(sink* s, const char* text, size_t n) {
  if (s->failed) return;
  if (s->len + n + 1 > s->cap) {
    size_t cap = (s->cap + n + 1) * 2;
    char* grown = realloc(s->text, cap);
    if (!grown) {
      s->failed = 1;
      return;
    }
    s->text = grown;
    s->cap = cap;
  }
  memcpy(s->text + s->len, text, n);
  s->len += n;
  s->text[s->len] = '\0';
}

static void put_string(sink* s, const char* text) {
  put(s, "\"", 1);
  for (const unsigned char* p = (const unsigned char*)text; *p; p++) {
    char escaped[8];
    if (*p == '"' || *p == '\\') {
      escaped[0] = '\\';
      escaped[1] = (char)*p;
      put(s, escaped, 2);
    } else if (*p < 0x20) {
      snprintf(escaped, sizeof escaped, "\\u%04x", *p);
      put(s, escaped, 6);
    } else {
      put(s, (const char*)p, 1);
    }
  }
  put(s, "\"", 1);
}

static void put_value(sink* s, const json* v) {
  switch (v->kind) {
    case JSON_NULL: put(s, "null", 4); break;
    case JSON_TRUE: put(s, "true", 4); break;
    case JSON_FALSE: put(s, "false", 5); break;
    case JSON_NUMBER: put(s, v->text, strlen(v->text)); break;
    case JSON_STRING: put_string(s, v->text); break;
    case JSON_ARRAY:
    case JSON_OBJECT:
      put(s, v->kind == JSON_ARRAY ? "[" : "{", 1);
      for (const json* e = v->child; e; e = e->next) {
        if (e != v->child) put(s, ",", 1);
        if (v->kind == JSON_OBJECT) {
          put_string(s, e->key);
          put(s, ":", 1);
        }
        put_value(s, e);
      }
      put(s, v->kind == JSON_ARRAY ? "]" : "}", 1);
      break;
  }
}

char* json_write(const json* value) {
  sink s = {NULL, 0, 0, 0};
  put_value(&s, value);
  if (s.failed) {
    free(s.text);
    return NULL;
  }
  return s.text;
}
