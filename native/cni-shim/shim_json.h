// The few fields of a CNI network configuration the shim needs to answer without a guard, read
// as JSON.parse reads them (the last of a repeated key wins), and nothing else: pure functions,
// no system calls, no allocation.
#ifndef FLANNEL_GUARD_SHIM_JSON_H_
#define FLANNEL_GUARD_SHIM_JSON_H_

#define SHIM_SOCKET_MAX 107  // sun_path less its NUL
#define SHIM_JSON_MAX_DEPTH 512

struct shim_config {
  // cniVersion when it is a string: decoded, and its token as written (VERSION echoes it).
  char version[32];
  unsigned long version_length;  // 0: absent or not a string; past the buffer: too long
  const char* version_token;
  unsigned long version_token_length;
  // socket, decoded; socket_invalid when present but not a string (or too long to hold).
  char socket[SHIM_SOCKET_MAX + 2];
  unsigned long socket_length;
  int socket_invalid;
  // budgetMs when it is a whole number (1e3 and 1000.0 are), else -1.
  long budget_ms;
  int fail_on_error;        // failOnError is true
  const char* prev_result;  // prevResult's value as written (null: absent)
  unsigned long prev_result_length;
};

// 1 when `json` is one JSON object (and nothing after it but whitespace), with its fields in
// `config`; 0 otherwise (the fields then mean nothing).
int shim_parse_config(const char* json, unsigned long length, struct shim_config* config);

// A version as the error objects repeat it: digits.digits.digits.
int shim_is_version(const char* text, unsigned long length);

// Only JSON whitespace (VERSION may be called with an empty stdin).
int shim_is_blank(const char* text, unsigned long length);

// An absolute path of 1-107 printable ASCII characters, without a quote or a backslash.
int shim_is_socket_path(const char* text, unsigned long length);

#endif  // FLANNEL_GUARD_SHIM_JSON_H_
