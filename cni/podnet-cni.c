/*
 * podnet-cni and podnet-ipam: the CNI plugin a container runtime executes, one static
 * executable with no runtime dependency on the host (built with musl: scripts/build-cni.sh).
 *
 * It holds no CNI rule but VERSION. Every other command is carried as it came to the node
 * agent over its unix socket: one HTTP/1.1 request, POST /v1/cni/exec, with the program's
 * name, every CNI_* variable of the environment (percent-encoded, one header each) and
 * stdin byte for byte; the agent answers the exit code (CNI-Exit-Code) and the body, which
 * is printed as it is. The agent checks the configuration and the environment, converts
 * results, merges prevResult and writes every error object (docs/node.md).
 *
 * The configuration is scanned as JSON only for what reaching the agent needs: cniVersion,
 * type, agentSocket, agentTimeout and ipam.{agentSocket,agentTimeout}. When the agent
 * cannot be reached the plugin prints the specification's error itself (11, or 50 for
 * STATUS), except where nothing can be left behind: DEL of the IPAM role, DEL whose netns
 * is gone, GC of the IPAM role.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef PODNET_VERSION
#define PODNET_VERSION "dev"
#endif

#define SPEC_VERSION "1.1.0"
#define DEFAULT_SOCKET "/run/podnet/agent.sock"
/* above the agent's own ADD wait (30 s), so that its error 11 is what the runtime sees */
#define DEFAULT_TIMEOUT 60.0
/* a configuration is a few KiB; more than this is not one (error 6, said locally) */
#define MAX_STDIN (4 << 20)
#define MAX_HEAD (64 << 10)
#define MAX_ANSWER (16 << 20)
#define MAX_DEPTH 1000

extern char **environ;

static const char *const versions[] = {"0.3.1", "0.4.0", "1.0.0", "1.1.0"};

/* --- growable byte buffers ---------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len, cap;
} buf;

static void need_room(buf *b, size_t more) {
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown) {
        fputs("podnet-cni: out of memory\n", stderr);
        exit(1);
    }
    b->data = grown;
    b->cap = cap;
}

static void put(buf *b, const void *data, size_t n) {
    need_room(b, n);
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* every byte outside 0x21..0x7E, and '%' itself, as %XX: a header value stays one token
 * and any byte of the environment survives the trip */
static void put_percent(buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x21 || c > 0x7E || c == '%') {
            char esc[3] = {'%', hex[c >> 4], hex[c & 15]};
            put(b, esc, 3);
        } else {
            put(b, &s[i], 1);
        }
    }
}

static void put_json_string(buf *b, const char *s) {
    puts_(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            putf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            putf(b, "\\u%04x", c);
        else
            put(b, s, 1);
    }
    puts_(b, "\"");
}

/* --- the configuration: a JSON scanner that keeps only what reaching the agent needs -- */

typedef struct {
    const char *p, *end;
} scan;

/* a string value as found: decoded, or not usable (not a string, or not encodable) */
typedef struct {
    int ok;
    buf text;
} strval;

typedef struct {
    strval version, type, socket, ipam_socket;
    int has_timeout, has_ipam_timeout, ipam_is_object;
    double timeout, ipam_timeout;
} config;

static void skip_ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static void put_utf8(buf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    put(b, u, n);
}

/* A string at s->p (its opening quote), decoded into out when out is given; a lone
 * surrogate (valid JSON, no UTF-8) leaves the value unusable rather than the document. */
static int scan_string(scan *s, strval *out) {
    if (out) {
        out->ok = 1;
        out->text.len = 0;
        put(&out->text, "", 0);
    }
    s->p++;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c != '\\') {
            if (out) put(&out->text, s->p, 1);
            s->p++;
            continue;
        }
        if (s->end - s->p < 2)
            return 0;
        char e = s->p[1];
        const char *plain = strchr("\"\\/bfnrt", e);
        if (e && plain) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            if (out) put(&out->text, &to[plain - "\"\\/bfnrt"], 1);
            s->p += 2;
            continue;
        }
        unsigned cp, low;
        if (e != 'u' || s->end - s->p < 6 || !hex4(s->p + 2, &cp))
            return 0;
        s->p += 6;
        if (cp >= 0xD800 && cp < 0xDC00 && s->end - s->p >= 6 && s->p[0] == '\\' &&
            s->p[1] == 'u' && hex4(s->p + 2, &low) && low >= 0xDC00 && low < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            s->p += 6;
        } else if (cp >= 0xD800 && cp < 0xE000) {
            if (out) out->ok = 0;
            continue;
        }
        if (out) put_utf8(&out->text, cp);
    }
    return 0;
}

static int scan_digits(scan *s) {
    const char *start = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    return s->p > start;
}

static int literal(scan *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return 0;
    s->p += n;
    return 1;
}

/* A number, its value in *out when out is given; NaN and the infinities as Python's json
 * (the agent's reader) accepts them, so both read the same documents. */
static int scan_number(scan *s, double *out) {
    const char *start = s->p;
    if (literal(s, "NaN") || literal(s, "Infinity") || literal(s, "-Infinity")) {
        if (out) *out = start[0] == 'N' ? NAN : start[0] == '-' ? -INFINITY : INFINITY;
        return 1;
    }
    if (s->p < s->end && *s->p == '-')
        s->p++;
    if (s->p < s->end && *s->p == '0')
        s->p++;
    else if (!scan_digits(s))
        return 0;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!scan_digits(s)) return 0;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (!scan_digits(s)) return 0;
    }
    if (out) {
        char tmp[64];
        size_t n = (size_t)(s->p - start);
        if (n >= sizeof tmp) n = sizeof tmp - 1; /* a longer number is a precision detail */
        memcpy(tmp, start, n);
        tmp[n] = '\0';
        *out = strtod(tmp, NULL);
    }
    return 1;
}

static int scan_value(scan *s, int depth, config *cfg, int where);

/* where: 0 any object, 1 the top level, 2 the top level's "ipam" */
static int scan_object(scan *s, int depth, config *cfg, int where) {
    strval key = {0, {0}};
    int ok = 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 1;
    }
    for (;;) {
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"' || !scan_string(s, where ? &key : NULL))
            goto out;
        skip_ws(s);
        if (s->p >= s->end || *s->p++ != ':')
            goto out;
        skip_ws(s);
        const char *k = where && key.ok ? key.text.data : "";
        int field = !strcmp(k, "agentSocket") ? 1 : !strcmp(k, "agentTimeout") ? 2
                  : where == 1 && !strcmp(k, "cniVersion") ? 3
                  : where == 1 && !strcmp(k, "type") ? 4
                  : where == 1 && !strcmp(k, "ipam") ? 5 : 0;
        if (!where || key.text.len != strlen(k))
            field = 0; /* a key with a NUL byte is none of these */
        /* a key given twice counts as its last value, as in the agent's reader */
        strval *str = field == 3 ? &cfg->version : field == 4 ? &cfg->type
                    : field == 1 ? (where == 1 ? &cfg->socket : &cfg->ipam_socket) : NULL;
        if (str) str->ok = 0;
        if (field == 2) *(where == 1 ? &cfg->has_timeout : &cfg->has_ipam_timeout) = 0;
        if (field == 5) {
            cfg->ipam_is_object = 0;
            cfg->ipam_socket.ok = 0;
            cfg->has_ipam_timeout = 0;
        }
        if (s->p >= s->end)
            goto out;
        if (str && *s->p == '"') {
            if (!scan_string(s, str)) goto out;
        } else if (field == 2 && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9') ||
                                  *s->p == 'N' || *s->p == 'I')) {
            double *t = where == 1 ? &cfg->timeout : &cfg->ipam_timeout;
            if (!scan_number(s, t)) goto out;
            *(where == 1 ? &cfg->has_timeout : &cfg->has_ipam_timeout) = 1;
        } else if (field == 5 && *s->p == '{') {
            cfg->ipam_is_object = 1;
            if (!scan_object(s, depth + 1, cfg, 2)) goto out;
        } else if (!scan_value(s, depth + 1, cfg, 0)) {
            goto out;
        }
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            ok = 1;
        }
        goto out;
    }
out:
    free(key.text.data);
    return ok;
}

static int scan_value(scan *s, int depth, config *cfg, int where) {
    if (depth > MAX_DEPTH || s->p >= s->end)
        return 0;
    switch (*s->p) {
    case '{':
        return scan_object(s, depth, cfg, where);
    case '[':
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return 1;
        }
        for (;;) {
            skip_ws(s);
            if (!scan_value(s, depth + 1, cfg, 0))
                return 0;
            skip_ws(s);
            if (s->p < s->end && *s->p == ',') {
                s->p++;
                continue;
            }
            if (s->p < s->end && *s->p == ']') {
                s->p++;
                return 1;
            }
            return 0;
        }
    case '"':
        return scan_string(s, NULL);
    case 't':
        return literal(s, "true");
    case 'f':
        return literal(s, "false");
    case 'n':
        return literal(s, "null");
    default:
        return scan_number(s, NULL);
    }
}

/* Well-formed UTF-8 (no overlong forms, no surrogates), as the agent's decoder wants it. */
static int utf8_ok(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return 0;
        if (i + k >= n) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* Fills cfg from the document; a document that is not a JSON object leaves it empty
 * (the defaults apply; the agent, sent the same bytes, answers error 6). */
static void read_config(const char *data, size_t n, config *cfg) {
    scan s = {data, data + n};
    skip_ws(&s);
    int ok = utf8_ok((const unsigned char *)data, n) && s.p < s.end && *s.p == '{' &&
             scan_object(&s, 0, cfg, 1);
    skip_ws(&s);
    if (!ok || s.p != s.end) {
        cfg->version.ok = cfg->type.ok = cfg->socket.ok = cfg->ipam_socket.ok = 0;
        cfg->has_timeout = cfg->has_ipam_timeout = cfg->ipam_is_object = 0;
    }
}

/* --- talking to the agent ----------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* why the agent could not be asked: the end of "podnet node agent not reachable at ..." */
static char reason[512];

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return -1;
}

static double deadline, timeout_s;

/* Waits for events on fd until the deadline: 1 ready, -1 (reason set) timed out. */
static int wait_for(int fd, short events) {
    for (;;) {
        double left = deadline - now();
        if (left <= 0)
            return fail("no answer within %g s", timeout_s);
        struct pollfd p = {fd, events, 0};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return fail("%s", strerror(errno));
    }
}

static int connect_agent(const char *path, size_t path_len) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) != path_len)
        return fail("the socket path has a NUL byte");
    if (path_len >= sizeof addr.sun_path)
        return fail("the socket path is longer than %zu bytes", sizeof addr.sun_path - 1);
    memcpy(addr.sun_path, path, path_len);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail("%s", strerror(errno));
    double pause = 0.005;
    for (;;) {
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            return fd;
        if (errno == EINTR)
            continue;
        if (errno == EINPROGRESS) {
            int err = 0;
            socklen_t len = sizeof err;
            if (wait_for(fd, POLLOUT) < 0) break;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (!err) return fd;
            fail("%s", strerror(err));
            break;
        }
        if (errno != EAGAIN) {
            fail("%s", strerror(errno));
            break;
        }
        /* the agent is there with its listen backlog full (a burst of sandboxes): the
         * kernel queues nobody on a unix socket, so try again until the deadline */
        double left = deadline - now();
        if (left <= 0) {
            fail("no answer within %g s", timeout_s);
            break;
        }
        double nap = pause < left ? pause : left;
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        nanosleep(&ts, NULL);
        pause = pause * 2 < 0.1 ? pause * 2 : 0.1;
    }
    close(fd);
    return -1;
}

static int send_all(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t sent = send(fd, data, n, MSG_NOSIGNAL);
        if (sent > 0) {
            data += sent;
            n -= (size_t)sent;
        } else if (sent < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_for(fd, POLLOUT) < 0) return -1;
        } else {
            return fail("%s", sent < 0 ? strerror(errno) : "send failed");
        }
    }
    return 0;
}

/* the answer as read so far, and where the parse stands in it */
typedef struct {
    int fd, eof;
    buf in;
    size_t pos;
} answer;

/* Reads more of the answer: 1 got some, 0 end of stream, -1 failed (reason set). */
static int more(answer *a) {
    if (a->eof)
        return 0;
    if (a->in.len > MAX_ANSWER)
        return fail("an answer larger than %d bytes", MAX_ANSWER);
    need_room(&a->in, 65536);
    for (;;) {
        ssize_t n = read(a->fd, a->in.data + a->in.len, 65536);
        if (n > 0) {
            a->in.len += (size_t)n;
            a->in.data[a->in.len] = '\0';
            return 1;
        }
        if (n == 0) {
            a->eof = 1;
            return 0;
        }
        if (errno == EAGAIN || errno == EINTR) {
            if (wait_for(a->fd, POLLIN) < 0) return -1;
        } else {
            return fail("%s", strerror(errno));
        }
    }
}

/* The next line (CRLF or LF ended, terminator dropped) at a->pos: its length, -1 failed. */
static long next_line(answer *a, const char **line) {
    for (;;) {
        char *start = a->in.data ? a->in.data + a->pos : NULL;
        char *nl = start ? memchr(start, '\n', a->in.len - a->pos) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - start);
            a->pos += n + 1;
            if (n && start[n - 1] == '\r') n--;
            *line = start;
            return (long)n;
        }
        if (a->in.len - a->pos > MAX_HEAD)
            return fail("malformed HTTP answer: a line longer than %d bytes", MAX_HEAD);
        int got = more(a);
        if (got < 0) return -1;
        if (got == 0) return fail("the answer ended early");
    }
}

/* At least n bytes after a->pos, else -1 (reason set). */
static int have(answer *a, size_t n) {
    while (a->in.len - a->pos < n) {
        int got = more(a);
        if (got < 0) return -1;
        if (got == 0) return fail("the answer ended early");
    }
    return 0;
}

static int header_is(const char *line, long n, const char *name, const char **value) {
    size_t k = strlen(name);
    if ((size_t)n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return 0;
    const char *v = line + k + 1;
    while (v < line + n && (*v == ' ' || *v == '\t')) v++;
    *value = v;
    return 1;
}

/* A decimal number spanning [s, end) exactly, trailing blanks allowed; -1 when it is not. */
static long long decimal(const char *s, const char *end, int base) {
    while (end > s && (end[-1] == ' ' || end[-1] == '\t')) end--;
    if (s == end || end - s > 15) return -1;
    long long v = 0;
    for (; s < end; s++) {
        int d = *s >= '0' && *s <= '9' ? *s - '0'
              : base == 16 && *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
              : base == 16 && *s >= 'A' && *s <= 'F' ? *s - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * base + d;
    }
    return v;
}

static void quote_bytes(char *out, size_t size, const char *s, long n) {
    size_t o = 0;
    for (long i = 0; i < n && i < 80 && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        o += (size_t)(c >= 0x20 && c < 0x7F ? snprintf(out + o, size - o, "%c", c)
                                              : snprintf(out + o, size - o, "\\x%02x", c));
    }
    out[o] = '\0';
}

/* Reads the answer: its exit code, its body in *body; -1 (reason set) when it is none. */
static int read_answer(int fd, buf *body, int *exit_code) {
    answer a = {fd, 0, {0}, 0};
    const char *line, *value;
    long n = next_line(&a, &line);
    if (n < 0) {
        if (a.in.len == 0 && a.eof) fail("the agent closed the connection without answering");
        return -1;
    }
    char shown[400];
    quote_bytes(shown, sizeof shown, line, n);
    const char *sp = memchr(line, ' ', (size_t)n);
    if (n < 9 || strncmp(line, "HTTP/", 5) != 0 || !sp)
        return fail("not an HTTP answer: %s", shown);
    const char *code_end = memchr(sp + 1, ' ', (size_t)(line + n - sp - 1));
    long long status = decimal(sp + 1, code_end ? code_end : line + n, 10);
    if (status < 0)
        return fail("not an HTTP answer: %s", shown);
    long long length = -1, exit_code_found = -1;
    int chunked = 0, has_exit = 0;
    while ((n = next_line(&a, &line)) > 0) {
        if (header_is(line, n, "Content-Length", &value)) {
            length = decimal(value, line + n, 10);
            if (length < 0) {
                quote_bytes(shown, sizeof shown, value, line + n - value);
                return fail("malformed HTTP answer: Content-Length %s", shown);
            }
        } else if (header_is(line, n, "Transfer-Encoding", &value)) {
            for (const char *v = value; v + 7 <= line + n; v++)
                chunked |= strncasecmp(v, "chunked", 7) == 0;
        } else if (header_is(line, n, "CNI-Exit-Code", &value)) {
            has_exit = 1;
            exit_code_found = decimal(value, line + n, 10);
            if (exit_code_found > 255) exit_code_found = -1;
            quote_bytes(shown, sizeof shown, value, line + n - value);
        }
    }
    if (n < 0)
        return -1;
    if (status != 200 || !has_exit)
        return fail("answered HTTP %lld without CNI-Exit-Code", status);
    if (exit_code_found < 0)
        return fail("answered an invalid CNI-Exit-Code: %s", shown);
    if (chunked) {
        for (;;) {
            if ((n = next_line(&a, &line)) < 0) return -1;
            const char *ext = memchr(line, ';', (size_t)n);
            long long size = decimal(line, ext ? ext : line + n, 16);
            if (size < 0) {
                quote_bytes(shown, sizeof shown, line, n);
                return fail("malformed HTTP answer: chunk size %s", shown);
            }
            if (size == 0) break;
            if (have(&a, (size_t)size) < 0) return -1;
            put(body, a.in.data + a.pos, (size_t)size);
            a.pos += (size_t)size;
            if (next_line(&a, &line) < 0) return -1; /* the chunk's CRLF */
        }
    } else if (length >= 0) {
        if (have(&a, (size_t)length) < 0) return -1;
        put(body, a.in.data + a.pos, (size_t)length);
    } else {
        int got;
        while ((got = more(&a)) > 0) {}
        if (got < 0) return -1;
        put(body, a.in.data + a.pos, a.in.len - a.pos);
    }
    free(a.in.data);
    *exit_code = (int)exit_code_found;
    return 0;
}

/* --- the program -------------------------------------------------------------------- */

static int write_all(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        data += w;
        n -= (size_t)w;
    }
    return 0;
}

static int known_version(const strval *v) {
    for (size_t i = 0; v->ok && i < sizeof versions / sizeof *versions; i++)
        if (v->text.len == strlen(versions[i]) && !strcmp(v->text.data, versions[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN); /* a closed socket or stdout is an error to report, not a death */
    const char *command = getenv("CNI_COMMAND");
    command = command ? command : "";
    if (!strcmp(command, "VERSION")) {
        static const char out[] = "{\"cniVersion\":\"" SPEC_VERSION "\",\"supportedVersions\":"
                                  "[\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}\n";
        return write_all(1, out, sizeof out - 1) ? 1 : 0;
    }
    const char *program = argc > 0 && argv[0] ? argv[0] : "";
    const char *slash = strrchr(program, '/');
    program = slash ? slash + 1 : program;

    buf in = {0};
    int too_big = 0;
    if (!isatty(0)) {
        for (;;) {
            need_room(&in, 65536);
            ssize_t n = read(0, in.data + in.len, 65536);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            in.len += (size_t)n;
            if (in.len > MAX_STDIN) {
                too_big = 1;
                break;
            }
        }
    }
    put(&in, "", 0);
    config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (!too_big)
        read_config(in.data, in.len, &cfg);
    const char *version = known_version(&cfg.version) ? cfg.version.text.data : SPEC_VERSION;
    if (too_big) {
        buf out = {0};
        putf(&out, "{\"cniVersion\": \"%s\", \"code\": 6, \"msg\": \"network configuration "
             "(stdin): larger than %d bytes\"}\n", version, MAX_STDIN);
        write_all(1, out.data, out.len);
        return 1;
    }

    /* the role: the two installed names decide; under any other name, the configuration
     * (another plugin's config with an ipam section is executing its IPAM plugin) */
    int ipam = !strcmp(program, "podnet-ipam") ? 1 : !strcmp(program, "podnet-cni") ? 0
             : cfg.type.ok && strcmp(cfg.type.text.data, "podnet-cni") != 0 &&
               cfg.ipam_is_object;
    strval *sock = ipam ? &cfg.ipam_socket : &cfg.socket;
    const char *path = DEFAULT_SOCKET;
    size_t path_len = strlen(DEFAULT_SOCKET);
    if (sock->ok && sock->text.len > 0) {
        path = sock->text.data;
        path_len = sock->text.len;
    }
    int has_t = ipam ? cfg.has_ipam_timeout : cfg.has_timeout;
    double t = ipam ? cfg.ipam_timeout : cfg.timeout;
    timeout_s = has_t && t > 0 ? (t > 1e9 ? 1e9 : t) : DEFAULT_TIMEOUT;
    deadline = now() + timeout_s;

    buf head = {0};
    /* "podnet-cni/" is also the mark `podnet uninstall-cni` knows podnet's file by */
    putf(&head, "POST /v1/cni/exec HTTP/1.1\r\nHost: podnet-agent\r\nUser-Agent: podnet-cni/%s\r\n"
         "Connection: close\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
         "CNI-Program: ", PODNET_VERSION, in.len);
    put_percent(&head, program, strlen(program));
    puts_(&head, "\r\n");
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "CNI_", 4) != 0) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        puts_(&head, "CNI-Env: ");
        put_percent(&head, *e, (size_t)(eq - *e));
        puts_(&head, "=");
        put_percent(&head, eq + 1, strlen(eq + 1));
        puts_(&head, "\r\n");
    }
    puts_(&head, "\r\n");

    buf body = {0};
    int exit_code = 1;
    int fd = connect_agent(path, path_len);
    int asked = fd >= 0 && send_all(fd, head.data, head.len) == 0 &&
                send_all(fd, in.data, in.len) == 0 && read_answer(fd, &body, &exit_code) == 0;
    if (fd >= 0) close(fd);
    if (asked)
        return write_all(1, body.data ? body.data : "", body.len) ? 1 : exit_code;

    /* unreachable: what is left behind in a namespace that is gone, or by the IPAM role,
     * which holds nothing on the host, is nothing; the agent's own sweep does the rest */
    if (!strcmp(command, "DEL")) {
        const char *netns = getenv("CNI_NETNS");
        struct stat st;
        if (ipam || !netns || !*netns ||
            (stat(netns, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)))
            return 0;
    }
    if (!strcmp(command, "GC") && ipam)
        return 0;
    buf out = {0}, msg = {0};
    puts_(&msg, "podnet node agent not reachable at ");
    put(&msg, path, strlen(path));
    puts_(&msg, ": ");
    puts_(&msg, reason);
    putf(&out, "{\"cniVersion\": \"%s\", \"code\": %d, \"msg\": ", version,
         !strcmp(command, "STATUS") ? 50 : 11);
    put_json_string(&out, msg.data);
    puts_(&out, "}\n");
    write_all(1, out.data, out.len);
    return 1;
}
