// JSON as ECMA-404 and JSON.parse define it, scanned without recursion (a stack of the open
// brackets, bounded) and without copying but for the strings the shim reads.
#include "shim_json.h"

static const char* skip_space(const char* p, const char* end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  return p;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// p at the opening quote: past the closing one, or 0 when it is not a string. With `out`, the
// decoded content too (`*out_length` counts past `capacity` when it does not fit; a character
// outside ASCII from an escape is written as 0xff, which no field the shim reads may hold).
static const char* scan_string(const char* p, const char* end, char* out, unsigned long capacity,
                               unsigned long* out_length) {
  unsigned long n = 0;
  for (++p; p < end; ++p) {
    unsigned char c = (unsigned char)*p;
    char decoded;
    if (c == '"') {
      if (out_length) *out_length = n;
      return p + 1;
    }
    if (c < 0x20) return 0;
    if (c != '\\') {
      decoded = (char)c;
    } else {
      if (++p >= end) return 0;
      switch (*p) {
        case '"':
          decoded = '"';
          break;
        case '\\':
          decoded = '\\';
          break;
        case '/':
          decoded = '/';
          break;
        case 'b':
          decoded = '\b';
          break;
        case 'f':
          decoded = '\f';
          break;
        case 'n':
          decoded = '\n';
          break;
        case 'r':
          decoded = '\r';
          break;
        case 't':
          decoded = '\t';
          break;
        case 'u': {
          if (end - p < 5) return 0;
          int code = 0;
          for (int i = 1; i <= 4; ++i) {
            int digit = hex_value(p[i]);
            if (digit < 0) return 0;
            code = code * 16 + digit;
          }
          p += 4;
          decoded = code < 0x80 ? (char)code : (char)0xff;
          break;
        }
        default:
          return 0;
      }
    }
    if (out && n < capacity) out[n] = decoded;
    ++n;
  }
  return 0;
}

static const char* scan_literal(const char* p, const char* end, const char* word) {
  for (; *word; ++word, ++p)
    if (p >= end || *p != *word) return 0;
  return p;
}

static int is_digit(const char* p, const char* end) { return p < end && *p >= '0' && *p <= '9'; }

// A number's token; with `value`, its value when it is whole, 0..10^9 (else -1).
static const char* scan_number(const char* p, const char* end, long* value) {
  int negative = p < end && *p == '-';
  if (negative) ++p;
  if (!is_digit(p, end)) return 0;
  double mantissa = 0;
  int scale = 0;  // decimal places taken into the mantissa
  if (*p == '0') {
    ++p;
  } else {
    while (is_digit(p, end)) mantissa = mantissa * 10 + (*p++ - '0');
  }
  if (p < end && *p == '.') {
    ++p;
    if (!is_digit(p, end)) return 0;
    while (is_digit(p, end)) {
      if (scale < 30) {
        mantissa = mantissa * 10 + (*p - '0');
        ++scale;
      } else if (*p != '0') {
        scale = 1000;  // more precision than a budget has: not whole
      }
      ++p;
    }
  }
  long exponent = 0;
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    int exponent_negative = 0;
    if (p < end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
    if (!is_digit(p, end)) return 0;
    while (is_digit(p, end)) {
      if (exponent < 100000) exponent = exponent * 10 + (*p - '0');
      ++p;
    }
    if (exponent_negative) exponent = -exponent;
  }
  if (value) {
    *value = -1;
    long shift = exponent - scale;
    if (!negative && shift > -40 && shift < 40 && scale < 1000) {
      double whole = mantissa;
      for (; shift > 0; --shift) whole *= 10;
      for (; shift < 0; ++shift) whole /= 10;
      if (whole <= 1e9 && whole == (double)(long)whole) *value = (long)whole;
    }
  }
  return p;
}

// p at a value: past it, or 0 when it is not one (or nests deeper than SHIM_JSON_MAX_DEPTH).
static const char* scan_value(const char* p, const char* end) {
  char closers[SHIM_JSON_MAX_DEPTH];
  int depth = 0;
  for (;;) {
    p = skip_space(p, end);
    if (p >= end) return 0;
    switch (*p) {
      case '{':
      case '[':
        if (depth == SHIM_JSON_MAX_DEPTH) return 0;
        closers[depth++] = *p == '{' ? '}' : ']';
        p = skip_space(p + 1, end);
        if (p < end && *p == closers[depth - 1]) {
          ++p;
          --depth;
          break;  // an empty one: a value scanned
        }
        if (closers[depth - 1] == ']') continue;  // the first element
        if (p >= end || *p != '"' || !(p = scan_string(p, end, 0, 0, 0))) return 0;
        p = skip_space(p, end);
        if (p >= end || *p != ':') return 0;
        ++p;
        continue;  // the first member's value
      case '"':
        p = scan_string(p, end, 0, 0, 0);
        break;
      case 't':
        p = scan_literal(p, end, "true");
        break;
      case 'f':
        p = scan_literal(p, end, "false");
        break;
      case 'n':
        p = scan_literal(p, end, "null");
        break;
      default:
        p = scan_number(p, end, 0);
        break;
    }
    if (!p) return 0;
    // After a value: close what ends here, or go on to the next element or member.
    for (;;) {
      if (depth == 0) return p;
      p = skip_space(p, end);
      if (p >= end) return 0;
      if (*p == closers[depth - 1]) {
        ++p;
        --depth;
        continue;
      }
      if (*p != ',') return 0;
      p = skip_space(p + 1, end);
      if (closers[depth - 1] == '}') {
        if (p >= end || *p != '"' || !(p = scan_string(p, end, 0, 0, 0))) return 0;
        p = skip_space(p, end);
        if (p >= end || *p != ':') return 0;
        ++p;
      }
      break;
    }
  }
}

static int key_is(const char* key, unsigned long length, const char* name) {
  unsigned long i = 0;
  for (; name[i]; ++i)
    if (i >= length || key[i] != name[i]) return 0;
  return i == length;
}

int shim_parse_config(const char* json, unsigned long length, struct shim_config* config) {
  const char* p = json;
  const char* end = json + length;
  *config = (struct shim_config){.budget_ms = -1};
  p = skip_space(p, end);
  if (p >= end || *p != '{') return 0;
  p = skip_space(p + 1, end);
  if (p < end && *p == '}') return skip_space(p + 1, end) == end;
  for (;;) {
    char key[16];
    unsigned long key_length;
    if (p >= end || *p != '"') return 0;
    p = scan_string(p, end, key, sizeof key, &key_length);
    if (!p) return 0;
    p = skip_space(p, end);
    if (p >= end || *p != ':') return 0;
    const char* value = skip_space(p + 1, end);
    const char* value_end = scan_value(value, end);
    if (!value_end) return 0;
    if (key_length > sizeof key) {
      // no field the shim reads has so long a name
    } else if (key_is(key, key_length, "cniVersion")) {
      config->version_length = 0;
      config->version_token = 0;
      if (*value == '"') {
        scan_string(value, end, config->version, sizeof config->version, &config->version_length);
        config->version_token = value;
        config->version_token_length = (unsigned long)(value_end - value);
      }
    } else if (key_is(key, key_length, "socket")) {
      config->socket_length = 0;
      config->socket_invalid = *value != '"';
      if (*value == '"') {
        scan_string(value, end, config->socket, sizeof config->socket, &config->socket_length);
        if (config->socket_length == 0 || config->socket_length > SHIM_SOCKET_MAX) {
          config->socket_invalid = 1;
        }
      }
    } else if (key_is(key, key_length, "budgetMs")) {
      config->budget_ms = -1;
      if (*value == '-' || is_digit(value, end)) scan_number(value, end, &config->budget_ms);
    } else if (key_is(key, key_length, "failOnError")) {
      config->fail_on_error = *value == 't';
    } else if (key_is(key, key_length, "prevResult")) {
      config->prev_result = value;
      config->prev_result_length = (unsigned long)(value_end - value);
    }
    p = skip_space(value_end, end);
    if (p < end && *p == '}') return skip_space(p + 1, end) == end;
    if (p >= end || *p != ',') return 0;
    p = skip_space(p + 1, end);
  }
}

int shim_is_version(const char* text, unsigned long length) {
  int parts = 0;
  unsigned long i = 0;
  while (i < length) {
    unsigned long start = i;
    while (i < length && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == start) return 0;
    ++parts;
    if (i == length) break;
    if (text[i] != '.' || parts == 3) return 0;
    ++i;
  }
  return parts == 3 && text[length - 1] != '.';
}

int shim_is_blank(const char* text, unsigned long length) {
  return skip_space(text, text + length) == text + length;
}

int shim_is_socket_path(const char* text, unsigned long length) {
  if (length == 0 || length > SHIM_SOCKET_MAX || text[0] != '/') return 0;
  for (unsigned long i = 0; i < length; ++i) {
    unsigned char c = (unsigned char)text[i];
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return 0;
  }
  return 1;
}
