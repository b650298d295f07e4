// Unit tests for native/ethtool.cc against a scripted SIOCETHTOOL (in the style of
// ethtool's own test-features.c): each test lists the commands it expects, in order,
// with the kernel's reply to each; any other command, or one too many, fails the test.
//
// Coverage of docs/reliability.md (E):
//   E1  interface-name validation is TypeScript's job (before any syscall). This layer
//       only refuses what cannot be passed safely (empty, >= IFNAMSIZ, embedded NUL):
//       "ethtool: invalid interface name ...", "ethtool: SocketIoctl refuses ...".
//   E2  "ethtool: GSSET_INFO mask 0 ...", "ethtool: GSSET_INFO count 0 ...".
//   E3  "ethtool: GSSET_INFO EPERM/EOPNOTSUPP/EINVAL falls back to legacy ...", legacy sets.
//   E4  "ethtool: GSTRINGS ..." (len mismatch, unterminated, empty, duplicates).
//   E5  "ethtool: unknown feature ...".          E6 "ethtool: fixed/not available ...".
//   E7  "ethtool: SFEATURES with 64/65 features ...", "ethtool: GFEATURES size ...".
//   E8  "ethtool: SFEATURES F_WISH/F_UNSUPPORTED/F_COMPAT ...": flags are decoded and
//       reported with the re-read, not turned into an error (the reference's expected
//       outcome: "not an error and not 'not supported'").
//   E9  "ethtool: side effects ..." (tx-checksum-ip-generic off drops TSO). Recognising
//       the resulting RTM_NEWLINK as our own is the TypeScript guard's job.
//   E10 "ethtool: already matching state sends no SFEATURES".
//   E11 "ethtool: legacy STXCSUM EOPNOTSUPP ..." (one attempt, "not supported by driver").
//   E12 "ethtool: ENODEV names the socket's network namespace". This layer does not know
//       which netns its socket is in (the Ioctl is injected); the addon that created the
//       socket appends the netns identity. Creating the socket in the right netns is the
//       addon's job too.
//   E13 "ethtool: SFEATURES EPERM names CAP_NET_ADMIN". That gets need no privilege is a
//       kernel property; it was checked by hand with CAP_NET_ADMIN dropped (see report).
//   E14 "ethtool: ENODEV ..." (device gone before the write / before the re-read).
//   E15 "ethtool: EFAULT/EINVAL surfaced with the command name"; layouts are
//       static_asserts in ethtool.cc (a wrong layout does not compile).
//   E16 is an unprivileged integration test on `lo` in mocha (someone else's), not here.
#include "ethtool.h"

#include <linux/ethtool.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "test_harness.h"

namespace {

using fg::ethtool::DriverInfo;
using fg::ethtool::Feature;
using fg::ethtool::FeatureRequest;
using fg::ethtool::FeatureTable;
using fg::ethtool::Ioctl;
using fg::ethtool::SetFeaturesOutcome;

constexpr uint64_t kFeaturesMask = uint64_t{1} << ETH_SS_FEATURES;

template <typename T>
T Load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
void Store(uint8_t* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}

std::string CommandName(uint32_t command) {
  switch (command) {
    case ETHTOOL_GSSET_INFO:
      return "GSSET_INFO";
    case ETHTOOL_GSTRINGS:
      return "GSTRINGS";
    case ETHTOOL_GFEATURES:
      return "GFEATURES";
    case ETHTOOL_SFEATURES:
      return "SFEATURES";
    case ETHTOOL_GTXCSUM:
      return "GTXCSUM";
    case ETHTOOL_STXCSUM:
      return "STXCSUM";
    case ETHTOOL_GDRVINFO:
      return "GDRVINFO";
    default:
      return "command " + std::to_string(command);
  }
}

void Fail(const std::string& message) { throw fg_test::Failure(message); }

using Reply = std::function<int(uint8_t* command)>;

// The scripted kernel: a queue of (expected command, reply).
class ScriptedIoctl {
 public:
  ScriptedIoctl& Expect(uint32_t command, Reply reply) {
    steps_.push_back({command, std::move(reply)});
    return *this;
  }

  Ioctl AsIoctl() {
    return [this](const std::string& ifname, void* command) { return Call(ifname, command); };
  }

  const std::vector<uint32_t>& seen() const { return seen_; }
  bool Saw(uint32_t command) const {
    for (uint32_t each : seen_) {
      if (each == command) return true;
    }
    return false;
  }
  size_t Count(uint32_t command) const {
    size_t n = 0;
    for (uint32_t each : seen_) n += each == command ? 1 : 0;
    return n;
  }
  bool Done() const { return steps_.empty(); }
  const std::string& lastIfname() const { return lastIfname_; }

 private:
  struct Step {
    uint32_t command;
    Reply reply;
  };

  int Call(const std::string& ifname, void* command) {
    auto* bytes = static_cast<uint8_t*>(command);
    const uint32_t cmd = Load<uint32_t>(bytes);
    seen_.push_back(cmd);
    lastIfname_ = ifname;
    if (steps_.empty()) Fail("unexpected ioctl " + CommandName(cmd) + " after the script ended");
    Step step = std::move(steps_.front());
    steps_.pop_front();
    if (step.command != cmd) {
      Fail("expected ioctl " + CommandName(step.command) + ", got " + CommandName(cmd));
    }
    return step.reply(bytes);
  }

  std::deque<Step> steps_;
  std::vector<uint32_t> seen_;
  std::string lastIfname_;
};

// ---- Replies.

Reply Errno(int errnum) {
  return [errnum](uint8_t*) { return -errnum; };
}

Reply SsetReply(uint64_t mask, uint32_t count) {
  return [mask, count](uint8_t* command) {
    if (Load<uint64_t>(command + 8) != kFeaturesMask) Fail("GSSET_INFO must ask for features only");
    if (Load<uint32_t>(command + 4) != 0) Fail("GSSET_INFO reserved must be 0");
    Store<uint32_t>(command + 4, 0);
    Store<uint64_t>(command + 8, mask);
    Store<uint32_t>(command + 16, count);
    return 0;
  };
}

// Writes up to the allocated len (read from the request, as the kernel would not) of
// the given 32-byte slots; a name of 32+ bytes fills its slot with no NUL.
Reply StringsReply(std::vector<std::string> names, std::optional<uint32_t> returnedLen = {}) {
  return [names, returnedLen](uint8_t* command) {
    if (Load<uint32_t>(command + 4) != ETH_SS_FEATURES) Fail("GSTRINGS must ask for features");
    const uint32_t allocated = Load<uint32_t>(command + 8);
    const size_t n = std::min<size_t>(allocated, names.size());
    for (size_t i = 0; i < n; ++i) {
      uint8_t* slot = command + 12 + i * ETH_GSTRING_LEN;
      std::memset(slot, 0, ETH_GSTRING_LEN);
      std::memcpy(slot, names[i].data(), std::min<size_t>(names[i].size(), ETH_GSTRING_LEN));
    }
    Store<uint32_t>(command + 8, returnedLen ? *returnedLen : static_cast<uint32_t>(names.size()));
    return 0;
  };
}

struct Block {
  uint32_t available = 0;
  uint32_t requested = 0;
  uint32_t active = 0;
  uint32_t neverChanged = 0;
};

// Answers GFEATURES with `blocks` (at most as many as asked for) and records the asked size.
Reply FeaturesReply(std::vector<Block> blocks, uint32_t* askedSize = nullptr) {
  return [blocks, askedSize](uint8_t* command) {
    const uint32_t asked = Load<uint32_t>(command + 4);
    if (askedSize != nullptr) *askedSize = asked;
    for (size_t i = 0; i < std::min<size_t>(asked, blocks.size()); ++i) {
      uint8_t* at = command + 8 + i * 16;
      Store<uint32_t>(at + 0, blocks[i].available);
      Store<uint32_t>(at + 4, blocks[i].requested);
      Store<uint32_t>(at + 8, blocks[i].active);
      Store<uint32_t>(at + 12, blocks[i].neverChanged);
    }
    Store<uint32_t>(command + 4, static_cast<uint32_t>(blocks.size()));
    return 0;
  };
}

struct SetCapture {
  uint32_t size = 0;
  std::vector<uint32_t> valid;
  std::vector<uint32_t> requested;
};

Reply SfeaturesReply(int rc, SetCapture* capture) {
  return [rc, capture](uint8_t* command) {
    capture->size = Load<uint32_t>(command + 4);
    for (uint32_t i = 0; i < capture->size; ++i) {
      capture->valid.push_back(Load<uint32_t>(command + 8 + i * 8));
      capture->requested.push_back(Load<uint32_t>(command + 8 + i * 8 + 4));
    }
    return rc;
  };
}

Reply ValueReply(uint32_t value, uint32_t* seenData = nullptr) {
  return [value, seenData](uint8_t* command) {
    if (seenData != nullptr) *seenData = Load<uint32_t>(command + 4);
    Store<uint32_t>(command + 4, value);
    return 0;
  };
}

// ---- A device model: a name and a state per bit.

struct Model {
  explicit Model(uint32_t count) : names(count), blocks((count + 31) / 32) {}

  Model& Add(uint32_t bit, const std::string& name, bool available, bool requested, bool active,
             bool neverChanged = false) {
    names[bit] = name;
    SetBit(bit, &Block::available, available);
    SetBit(bit, &Block::requested, requested);
    SetBit(bit, &Block::active, active);
    SetBit(bit, &Block::neverChanged, neverChanged);
    return *this;
  }
  void SetBit(uint32_t bit, uint32_t Block::*field, bool on) {
    const uint32_t mask = 1u << (bit % 32);
    uint32_t& word = blocks[bit / 32].*field;
    word = on ? (word | mask) : (word & ~mask);
  }
  uint32_t count() const { return static_cast<uint32_t>(names.size()); }

  // GSSET_INFO, GSTRINGS, GFEATURES for this model.
  void ExpectRead(ScriptedIoctl& script, uint32_t* askedSize = nullptr) const {
    script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, count()))
        .Expect(ETHTOOL_GSTRINGS, StringsReply(names))
        .Expect(ETHTOOL_GFEATURES, FeaturesReply(blocks, askedSize));
  }

  std::vector<std::string> names;
  std::vector<Block> blocks;
};

// A vxlan device as kernel 6.18 reports it: 64 feature bits (2 blocks), the names at
// their real bit positions, bits 2, 12, 13 and 32 undefined (empty names), and the
// state read from a fresh `ip link add vx0 type vxlan` (a subset of the 60 names).
constexpr uint32_t kSg = 0, kIpCsum = 1, kHwCsum = 3, kIpv6Csum = 4, kVlanChallenged = 10,
                   kGro = 14, kTso = 16, kTsoEcn = 18, kTsoMangleid = 19, kTso6 = 20, kUso = 33,
                   kRxcsum = 40, kNocache = 41, kBit64 = 64;

Model Vxlan(uint32_t count = 64) {
  Model model(count);
  model.Add(kSg, "tx-scatter-gather", true, true, true)
      .Add(kIpCsum, "tx-checksum-ipv4", false, false, false)
      .Add(kHwCsum, "tx-checksum-ip-generic", true, true, true)
      .Add(kIpv6Csum, "tx-checksum-ipv6", false, false, false)
      .Add(kVlanChallenged, "vlan-challenged", false, false, false, true)
      .Add(kGro, "rx-gro", true, true, true)
      .Add(kTso, "tx-tcp-segmentation", true, true, true)
      .Add(kTsoEcn, "tx-tcp-ecn-segmentation", true, true, true)
      .Add(kTsoMangleid, "tx-tcp-mangleid-segmentation", true, true, true)
      .Add(kTso6, "tx-tcp6-segmentation", true, true, true)
      .Add(kUso, "tx-udp-segmentation", true, true, true)
      .Add(kRxcsum, "rx-checksum", true, true, true)
      .Add(kNocache, "tx-nocache-copy", true, false, false);
  // A hypothetical 65th feature, to test the 3-block layout.
  if (count > kBit64) model.Add(kBit64, "bit-sixty-four", true, false, false);
  return model;
}

const Feature* Find(const FeatureTable& table, const std::string& name) {
  for (const auto& feature : table.features) {
    if (feature.name == name) return &feature;
  }
  return nullptr;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

const std::string kIf = "flannel.1";

}  // namespace

// ---------------------------------------------------------------- GetFeatures

TEST_CASE("ethtool: reads named features with their state and [fixed]") {
  ScriptedIoctl script;
  uint32_t askedSize = 0;
  Vxlan().ExpectRead(script, &askedSize);
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(script.Done());
  EXPECT_EQ(script.lastIfname(), kIf);
  EXPECT_EQ(askedSize, 2u);
  const FeatureTable& table = result.value();
  EXPECT_FALSE(table.legacy);
  EXPECT_EQ(table.features.size(), 13u);
  EXPECT_EQ(table.features.front().name, "tx-scatter-gather");
  EXPECT_EQ(table.features.back().name, "tx-nocache-copy");
  const Feature* csum = Find(table, "tx-checksum-ip-generic");
  EXPECT_TRUE(csum != nullptr);
  EXPECT_TRUE(csum->available && csum->requested && csum->active && !csum->fixed);
  const Feature* ipv4 = Find(table, "tx-checksum-ipv4");
  EXPECT_TRUE(ipv4 != nullptr && !ipv4->available && ipv4->fixed && !ipv4->active);
  const Feature* challenged = Find(table, "vlan-challenged");  // never_changed
  EXPECT_TRUE(challenged != nullptr && challenged->fixed && !challenged->active);
  const Feature* rx = Find(table, "rx-checksum");  // bit 40: second block
  EXPECT_TRUE(rx != nullptr && rx->available && rx->active && !rx->fixed);
  const Feature* nocache = Find(table, "tx-nocache-copy");  // changeable, off
  EXPECT_TRUE(nocache != nullptr && nocache->available && !nocache->active && !nocache->fixed);
}

TEST_CASE("ethtool: reads a 65-feature table in 3 blocks, bit 64 from the third") {
  ScriptedIoctl script;
  uint32_t askedSize = 0;
  Vxlan(65).ExpectRead(script, &askedSize);
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(askedSize, 3u);
  const Feature* last = Find(result.value(), "bit-sixty-four");
  EXPECT_TRUE(last != nullptr && last->available && !last->active && !last->fixed);
  EXPECT_EQ(result.value().features.back().name, "bit-sixty-four");
}

TEST_CASE("ethtool: GSSET_INFO mask 0 is EOPNOTSUPP with no GSTRINGS") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(0, 0));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GSSET_INFO)");
  EXPECT_EQ(result.error().interface, kIf);
  EXPECT_TRUE(Contains(result.error().detail, "no named features"));
  EXPECT_EQ(script.seen().size(), 1u);
}

TEST_CASE("ethtool: GSSET_INFO count 0 is EOPNOTSUPP with no GSTRINGS") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 0));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_TRUE(Contains(result.error().detail, "no named features"));
  EXPECT_FALSE(script.Saw(ETHTOOL_GSTRINGS));
}

TEST_CASE("ethtool: GSSET_INFO implausible count is refused before allocating") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 0xffffffffu));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EPROTO);
  EXPECT_TRUE(Contains(result.error().detail, "implausible feature count"));
  EXPECT_EQ(script.seen().size(), 1u);
}

TEST_CASE("ethtool: GSSET_INFO reply with an unasked lower string set is refused") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask | 1u, 10));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EPROTO);
  EXPECT_EQ(script.seen().size(), 1u);
}

TEST_CASE("ethtool: GSSET_INFO EPERM falls back to legacy GTXCSUM") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EPERM)).Expect(ETHTOOL_GTXCSUM, ValueReply(1));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(script.Done());
  EXPECT_TRUE(result.value().legacy);
  EXPECT_EQ(result.value().features.size(), 1u);
  EXPECT_EQ(result.value().features[0].name, "tx-checksumming");
  EXPECT_TRUE(result.value().features[0].active);
  EXPECT_TRUE(result.value().features[0].requested);
}

TEST_CASE("ethtool: GSSET_INFO EOPNOTSUPP falls back to legacy GTXCSUM") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP)).Expect(ETHTOOL_GTXCSUM, ValueReply(0));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().legacy);
  EXPECT_FALSE(result.value().features[0].active);
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: GSSET_INFO EINVAL falls back to legacy GTXCSUM") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EINVAL)).Expect(ETHTOOL_GTXCSUM, ValueReply(1));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().legacy);
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: legacy fallback failure names GTXCSUM and the unavailable features") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP)).Expect(ETHTOOL_GTXCSUM, Errno(EOPNOTSUPP));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GTXCSUM)");
  EXPECT_TRUE(Contains(result.error().detail, "named features unavailable"));
}

TEST_CASE("ethtool: GSSET_INFO ENODEV is an error, not a legacy fallback") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(ENODEV));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, ENODEV);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GSSET_INFO)");
  EXPECT_FALSE(script.Saw(ETHTOOL_GTXCSUM));
}

TEST_CASE("ethtool: ENODEV names the socket's network namespace") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(ENODEV));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), "vx0");
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().interface, "vx0");
  EXPECT_TRUE(Contains(result.error().detail, "network namespace"));
}

TEST_CASE("ethtool: GSTRINGS returning fewer names than GSSET_INFO is an error") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 3))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({"a", "b", "c"}, 2));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EPROTO);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GSTRINGS)");
  EXPECT_TRUE(Contains(result.error().detail, "returned 2 feature names, GSSET_INFO said 3"));
  EXPECT_FALSE(script.Saw(ETHTOOL_GFEATURES));
}

TEST_CASE("ethtool: GSTRINGS returning more names than allocated is an error, not an overread") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 2))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({"a", "b"}, 100000));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EPROTO);
  EXPECT_FALSE(script.Saw(ETHTOOL_GFEATURES));
}

TEST_CASE("ethtool: GSTRINGS unterminated 32-byte names are force-terminated") {
  const std::string full(32, 'x');
  const std::string longer = std::string(31, 'y') + "zzzz";  // 35 bytes: slot holds 32
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 3))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({full, longer, "ok"}))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply({{0x7, 0x0, 0x2, 0x0}}));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(result.value().features.size(), 3u);
  EXPECT_EQ(result.value().features[0].name, std::string(31, 'x'));
  EXPECT_EQ(result.value().features[1].name, std::string(31, 'y'));
  EXPECT_EQ(result.value().features[2].name, "ok");
  EXPECT_TRUE(result.value().features[1].active);
  EXPECT_FALSE(result.value().features[0].active);
}

TEST_CASE("ethtool: GSTRINGS empty names are skipped with bit indexes kept") {
  ScriptedIoctl script;
  // Bits 0 and 2 are undefined; "second" is bit 1, "fourth" is bit 3.
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 4))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({"", "second", "", "fourth"}))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply({{0x8, 0x0, 0x2, 0x0}}));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(result.value().features.size(), 2u);
  EXPECT_EQ(result.value().features[0].name, "second");
  EXPECT_TRUE(result.value().features[0].active);
  EXPECT_FALSE(result.value().features[0].available);
  EXPECT_EQ(result.value().features[1].name, "fourth");
  EXPECT_FALSE(result.value().features[1].active);
  EXPECT_TRUE(result.value().features[1].available);
}

TEST_CASE("ethtool: GSTRINGS duplicate names are an EINVAL-class error") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 3))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({"rx-gro", "tx-lro", "rx-gro"}));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GSTRINGS)");
  EXPECT_TRUE(Contains(result.error().detail, "duplicate feature name \"rx-gro\" at bits 0 and 2"));
  EXPECT_FALSE(script.Saw(ETHTOOL_GFEATURES));
}

TEST_CASE("ethtool: GSTRINGS names that collide only after termination are duplicates") {
  const std::string a = std::string(31, 'n') + "a";
  const std::string b = std::string(31, 'n') + "b";
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 2))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({a, b}));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
}

TEST_CASE("ethtool: GFEATURES size is ceil(GSSET_INFO count / 32)") {
  const std::vector<std::pair<uint32_t, uint32_t>> cases = {{1, 1},  {31, 1}, {32, 1},   {33, 2},
                                                            {64, 2}, {65, 3}, {2048, 64}};
  for (const auto& [count, blocks] : cases) {
    Model model(count);
    model.Add(count - 1, "last", true, true, true);
    ScriptedIoctl script;
    uint32_t asked = 0;
    model.ExpectRead(script, &asked);
    auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
    EXPECT_TRUE(result.ok());
    EXPECT_EQ(asked, blocks);
    EXPECT_EQ(result.value().features.size(), 1u);
    EXPECT_TRUE(result.value().features[0].active);
  }
}

TEST_CASE("ethtool: GFEATURES answering fewer blocks than asked reads no stale state") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 40))
      .Expect(ETHTOOL_GSTRINGS, StringsReply([] {
                std::vector<std::string> names(40);
                names[0] = "low";
                names[39] = "high";
                return names;
              }()))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply({{1, 1, 1, 0}}));  // one block only
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(Find(result.value(), "low")->active);
  const Feature* high = Find(result.value(), "high");
  EXPECT_TRUE(high != nullptr && !high->active && !high->available && high->fixed);
}

TEST_CASE("ethtool: GFEATURES EFAULT surfaced with the command name") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 2))
      .Expect(ETHTOOL_GSTRINGS, StringsReply({"a", "b"}))
      .Expect(ETHTOOL_GFEATURES, Errno(EFAULT));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EFAULT);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GFEATURES)");
  EXPECT_EQ(result.error().interface, kIf);
  EXPECT_FALSE(result.error().detail.empty());
}

TEST_CASE("ethtool: GSTRINGS EINVAL surfaced with the command name") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 2))
      .Expect(ETHTOOL_GSTRINGS, Errno(EINVAL));
  auto result = fg::ethtool::GetFeatures(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GSTRINGS)");
  EXPECT_TRUE(Contains(result.error().detail, "struct layout"));
}

TEST_CASE("ethtool: implausible negative ioctl results become EIO, not negated garbage") {
  for (int rc : {INT32_MIN, -100000}) {
    ScriptedIoctl script;
    script.Expect(ETHTOOL_GDRVINFO, [rc](uint8_t*) { return rc; });
    auto result = fg::ethtool::GetDriverInfo(script.AsIoctl(), kIf);
    EXPECT_FALSE(result.ok());
    EXPECT_EQ(result.error().errnum, EIO);
    EXPECT_TRUE(Contains(result.error().detail, "implausible"));
  }
}

TEST_CASE("ethtool: invalid interface name is refused before any ioctl") {
  for (const std::string& name :
       {std::string(), std::string(16, 'a'), std::string("fl\0x", 4), std::string(300, 'b')}) {
    ScriptedIoctl script;
    auto get = fg::ethtool::GetFeatures(script.AsIoctl(), name);
    auto set =
        fg::ethtool::SetFeatures(script.AsIoctl(), name, {{"tx-checksum-ip-generic", false}});
    auto info = fg::ethtool::GetDriverInfo(script.AsIoctl(), name);
    EXPECT_FALSE(get.ok() || set.ok() || info.ok());
    EXPECT_EQ(get.error().errnum, EINVAL);
    EXPECT_EQ(set.error().errnum, EINVAL);
    EXPECT_EQ(info.error().errnum, EINVAL);
    EXPECT_TRUE(Contains(get.error().detail, "invalid interface name"));
    EXPECT_TRUE(script.seen().empty());
  }
  // 15 bytes is the longest name that fits ifr_name with its NUL.
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GDRVINFO, Errno(ENODEV));
  EXPECT_EQ(fg::ethtool::GetDriverInfo(script.AsIoctl(), std::string(15, 'a')).error().errnum,
            ENODEV);
}

// ---------------------------------------------------------------- SetFeatures

TEST_CASE("ethtool: unknown feature is ENODATA and nothing is written") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  auto result = fg::ethtool::SetFeatures(
      script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}, {"tx-frobnicate", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, ENODATA);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_SFEATURES)");
  EXPECT_TRUE(Contains(result.error().detail, "unknown feature tx-frobnicate"));
  EXPECT_FALSE(script.Saw(ETHTOOL_SFEATURES));
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: duplicate request names are EINVAL before any ioctl") {
  ScriptedIoctl script;
  auto result = fg::ethtool::SetFeatures(
      script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}, {"tx-checksum-ip-generic", true}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
  EXPECT_TRUE(Contains(result.error().detail, "requested twice"));
  EXPECT_TRUE(script.seen().empty());
}

TEST_CASE("ethtool: empty request list sends nothing") {
  ScriptedIoctl script;
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {});
  EXPECT_TRUE(result.ok());
  EXPECT_FALSE(result.value().written);
  EXPECT_TRUE(script.seen().empty());
}

TEST_CASE("ethtool: fixed (never_changed) feature is EOPNOTSUPP before SFEATURES") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"vlan-challenged", true}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_TRUE(Contains(result.error().detail, "vlan-challenged is fixed"));
  EXPECT_FALSE(script.Saw(ETHTOOL_SFEATURES));
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: not-available feature is EOPNOTSUPP before SFEATURES, even if it matches") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  // tx-checksum-ipv4 is off and not changeable: "off" already matches, still refused
  // (systemd set_features_bit), together with a changeable request: nothing written.
  auto result = fg::ethtool::SetFeatures(
      script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}, {"tx-checksum-ipv4", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_TRUE(Contains(result.error().detail, "tx-checksum-ipv4 is not changeable"));
  EXPECT_FALSE(script.Saw(ETHTOOL_SFEATURES));
}

TEST_CASE("ethtool: already matching state sends no SFEATURES") {
  Model model = Vxlan();
  model.Add(kHwCsum, "tx-checksum-ip-generic", true, false, false);
  ScriptedIoctl script;
  model.ExpectRead(script);
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf,
                                         {{"tx-checksum-ip-generic", false}, {"rx-gro", true}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(script.Done());
  EXPECT_FALSE(script.Saw(ETHTOOL_SFEATURES));
  const SetFeaturesOutcome& outcome = result.value();
  EXPECT_FALSE(outcome.written);
  EXPECT_EQ(outcome.requested.size(), 2u);
  EXPECT_EQ(outcome.active.size(), 2u);
  EXPECT_EQ(outcome.active[0].name, "tx-checksum-ip-generic");
  EXPECT_FALSE(outcome.active[0].enable);
  EXPECT_TRUE(outcome.active[1].enable);
  EXPECT_TRUE(outcome.sideEffects.empty());
  EXPECT_TRUE(outcome.notApplied.empty());
}

TEST_CASE("ethtool: requested already off but still active is written again") {
  Model model = Vxlan();
  model.Add(kHwCsum, "tx-checksum-ip-generic", true, false, true);  // wish kept, not in effect
  ScriptedIoctl script;
  SetCapture capture;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(ETHTOOL_F_WISH, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(model.blocks));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().written);
  EXPECT_TRUE(result.value().kernelWish);
  EXPECT_EQ(result.value().notApplied.size(), 1u);
}

TEST_CASE("ethtool: SFEATURES with 64 features sends 2 blocks with the right word and bit") {
  Model model(64);
  model.Add(3, "tx-checksum-ip-generic", true, true, true)
      .Add(33, "rx-checksum", true, false, false)
      .Add(63, "last-bit", true, true, true);
  Model after = model;
  after.Add(3, "tx-checksum-ip-generic", true, false, false)
      .Add(33, "rx-checksum", true, true, true)
      .Add(63, "last-bit", true, false, false);
  ScriptedIoctl script;
  SetCapture capture;
  uint32_t rereadSize = 0;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(0, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(after.blocks, &rereadSize));
  auto result = fg::ethtool::SetFeatures(
      script.AsIoctl(), kIf,
      {{"tx-checksum-ip-generic", false}, {"rx-checksum", true}, {"last-bit", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(script.Done());
  EXPECT_EQ(capture.size, 2u);
  EXPECT_EQ(capture.valid.size(), 2u);
  EXPECT_EQ(capture.valid[0], 1u << 3);
  EXPECT_EQ(capture.requested[0], 0u);
  EXPECT_EQ(capture.valid[1], (1u << 1) | (1u << 31));
  EXPECT_EQ(capture.requested[1], 1u << 1);
  EXPECT_EQ(rereadSize, 2u);
  EXPECT_TRUE(result.value().written);
  EXPECT_TRUE(result.value().notApplied.empty());
  EXPECT_TRUE(result.value().sideEffects.empty());
  EXPECT_FALSE(result.value().kernelWish || result.value().kernelUnsupported ||
               result.value().kernelCompat);
}

TEST_CASE("ethtool: SFEATURES with 65 features sends 3 blocks, bit 64 in word 2") {
  Model model = Vxlan(65);
  Model after = model;
  after.Add(kBit64, "bit-sixty-four", true, true, true);
  ScriptedIoctl script;
  SetCapture capture;
  uint32_t rereadSize = 0;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(0, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(after.blocks, &rereadSize));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"bit-sixty-four", true}});
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(capture.size, 3u);
  EXPECT_EQ(capture.valid.size(), 3u);
  EXPECT_EQ(capture.valid[0], 0u);
  EXPECT_EQ(capture.valid[1], 0u);
  EXPECT_EQ(capture.valid[2], 1u);
  EXPECT_EQ(capture.requested[2], 1u);
  EXPECT_EQ(rereadSize, 3u);
  EXPECT_TRUE(result.value().active[0].enable);
}

TEST_CASE("ethtool: side effects of tx-checksum-ip-generic off are reported from the re-read") {
  Model model = Vxlan();
  Model after = model;
  // What kernel 6.18 did on a real vxlan device (see the report): without checksum
  // offload the TSO/USO bits drop out of `active` and stay `requested`; bit 33 is in
  // the second block.
  after.Add(kHwCsum, "tx-checksum-ip-generic", true, false, false)
      .Add(kTso, "tx-tcp-segmentation", true, true, false)
      .Add(kTsoEcn, "tx-tcp-ecn-segmentation", true, true, false)
      .Add(kTsoMangleid, "tx-tcp-mangleid-segmentation", true, true, false)
      .Add(kTso6, "tx-tcp6-segmentation", true, true, false)
      .Add(kUso, "tx-udp-segmentation", true, true, false);
  ScriptedIoctl script;
  SetCapture capture;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(0, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(after.blocks));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_TRUE(result.ok());
  const SetFeaturesOutcome& outcome = result.value();
  EXPECT_TRUE(outcome.written);
  EXPECT_EQ(capture.valid[0], 1u << kHwCsum);
  EXPECT_EQ(capture.requested[0], 0u);
  EXPECT_EQ(outcome.requested.size(), 1u);
  EXPECT_EQ(outcome.requested[0].name, "tx-checksum-ip-generic");
  EXPECT_FALSE(outcome.requested[0].enable);
  EXPECT_EQ(outcome.active.size(), 1u);
  EXPECT_FALSE(outcome.active[0].enable);
  EXPECT_TRUE(outcome.notApplied.empty());
  EXPECT_FALSE(outcome.kernelWish);
  const std::vector<std::string> expected = {"tx-tcp-segmentation", "tx-tcp-ecn-segmentation",
                                             "tx-tcp-mangleid-segmentation", "tx-tcp6-segmentation",
                                             "tx-udp-segmentation"};
  EXPECT_EQ(outcome.sideEffects.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(outcome.sideEffects[i].name, expected[i]);
    EXPECT_TRUE(outcome.sideEffects[i].before);
    EXPECT_FALSE(outcome.sideEffects[i].after);
  }
  EXPECT_FALSE(outcome.legacy);
}

TEST_CASE("ethtool: SFEATURES F_WISH is not an error and reports notApplied") {
  Model model = Vxlan();
  Model after = model;
  after.Add(kGro, "rx-gro", true, false, true);  // wish kept, still active
  ScriptedIoctl script;
  SetCapture capture;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(ETHTOOL_F_WISH, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(after.blocks));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"rx-gro", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().written);
  EXPECT_TRUE(result.value().kernelWish);
  EXPECT_FALSE(result.value().kernelUnsupported);
  EXPECT_EQ(result.value().notApplied.size(), 1u);
  EXPECT_EQ(result.value().notApplied[0], "rx-gro");
  EXPECT_TRUE(result.value().active[0].enable);      // active: still on
  EXPECT_FALSE(result.value().requested[0].enable);  // requested: off
}

TEST_CASE("ethtool: SFEATURES F_UNSUPPORTED is decoded, re-read, and reported per bit") {
  // hw_features changed between our read and the write: the kernel ignored the bit.
  Model model = Vxlan();
  ScriptedIoctl script;
  SetCapture capture;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(ETHTOOL_F_UNSUPPORTED, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(model.blocks));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().written);
  EXPECT_TRUE(result.value().kernelUnsupported);
  EXPECT_EQ(result.value().notApplied.size(), 1u);
  EXPECT_TRUE(result.value().active[0].enable);
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: SFEATURES F_COMPAT and unknown return bits are decoded, not errors") {
  Model model = Vxlan();
  Model after = model;
  after.Add(kSg, "tx-scatter-gather", true, false, false);
  ScriptedIoctl script;
  SetCapture capture;
  model.ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(ETHTOOL_F_COMPAT | 0x100, &capture))
      .Expect(ETHTOOL_GFEATURES, FeaturesReply(after.blocks));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-scatter-gather", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().kernelCompat);
  EXPECT_FALSE(result.value().kernelWish);
  EXPECT_TRUE(result.value().notApplied.empty());
}

TEST_CASE("ethtool: ENODEV at SFEATURES (device vanished after the read) aborts cleanly") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, Errno(ENODEV));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, ENODEV);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_SFEATURES)");
  EXPECT_EQ(result.error().interface, kIf);
  EXPECT_TRUE(script.Done());  // no retry
}

TEST_CASE("ethtool: ENODEV at the re-read after SFEATURES aborts cleanly") {
  ScriptedIoctl script;
  SetCapture capture;
  Vxlan().ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, SfeaturesReply(0, &capture))
      .Expect(ETHTOOL_GFEATURES, Errno(ENODEV));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, ENODEV);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GFEATURES)");
  EXPECT_TRUE(Contains(result.error().detail, "re-read after ETHTOOL_SFEATURES"));
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: ENODEV between GSTRINGS and GFEATURES aborts cleanly") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, SsetReply(kFeaturesMask, 64))
      .Expect(ETHTOOL_GSTRINGS, StringsReply(Vxlan().names))
      .Expect(ETHTOOL_GFEATURES, Errno(ENODEV));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, ENODEV);
  EXPECT_FALSE(script.Saw(ETHTOOL_SFEATURES));
}

TEST_CASE("ethtool: SFEATURES EPERM names CAP_NET_ADMIN") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, Errno(EPERM));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EPERM);
  EXPECT_TRUE(Contains(result.error().detail, "CAP_NET_ADMIN"));
  EXPECT_TRUE(Contains(result.error().detail, "network namespace"));
  EXPECT_FALSE(Contains(result.error().detail, "blocks"));
}

TEST_CASE("ethtool: SFEATURES EINVAL surfaced with the command name and the size sent") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, Errno(EINVAL));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_SFEATURES)");
  EXPECT_TRUE(Contains(result.error().detail, "size 2 blocks for 64 features"));
}

TEST_CASE("ethtool: SFEATURES EFAULT surfaced with the command name") {
  ScriptedIoctl script;
  Vxlan().ExpectRead(script);
  script.Expect(ETHTOOL_SFEATURES, Errno(EFAULT));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EFAULT);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_SFEATURES)");
}

// ---------------------------------------------------------------- legacy sets

TEST_CASE("ethtool: legacy set maps tx-checksum-ip-generic off to STXCSUM and re-reads") {
  ScriptedIoctl script;
  uint32_t sent = 99;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP))
      .Expect(ETHTOOL_GTXCSUM, ValueReply(1))
      .Expect(ETHTOOL_STXCSUM, ValueReply(0, &sent))
      .Expect(ETHTOOL_GTXCSUM, ValueReply(0));
  auto result =
      fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksum-ip-generic", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(script.Done());
  EXPECT_EQ(sent, 0u);
  EXPECT_TRUE(result.value().legacy);
  EXPECT_TRUE(result.value().written);
  EXPECT_FALSE(result.value().active[0].enable);
  EXPECT_EQ(result.value().active[0].name, "tx-checksum-ip-generic");
  EXPECT_TRUE(result.value().notApplied.empty());
}

TEST_CASE("ethtool: legacy set with the state already matching sends no STXCSUM") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EPERM)).Expect(ETHTOOL_GTXCSUM, ValueReply(0));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf,
                                         {{"tx-checksumming", false}, {"tx-checksum-ipv6", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_FALSE(result.value().written);
  EXPECT_TRUE(result.value().legacy);
  EXPECT_FALSE(script.Saw(ETHTOOL_STXCSUM));
}

TEST_CASE(
    "ethtool: legacy set of a non-checksum feature is EOPNOTSUPP named features unavailable") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EINVAL)).Expect(ETHTOOL_GTXCSUM, ValueReply(1));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf,
                                         {{"tx-checksum-ip-generic", false}, {"rx-gro", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_TRUE(Contains(result.error().detail, "named features unavailable"));
  EXPECT_TRUE(Contains(result.error().detail, "rx-gro"));
  EXPECT_FALSE(script.Saw(ETHTOOL_STXCSUM));
}

TEST_CASE("ethtool: legacy set with conflicting checksum requests is EINVAL") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP)).Expect(ETHTOOL_GTXCSUM, ValueReply(1));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf,
                                         {{"tx-checksum-ipv4", false}, {"tx-checksum-ipv6", true}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
  EXPECT_FALSE(script.Saw(ETHTOOL_STXCSUM));
}

TEST_CASE("ethtool: legacy STXCSUM EOPNOTSUPP is not supported by driver, tried once") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP))
      .Expect(ETHTOOL_GTXCSUM, ValueReply(1))
      .Expect(ETHTOOL_STXCSUM, Errno(EOPNOTSUPP));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksumming", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_STXCSUM)");
  EXPECT_TRUE(Contains(result.error().detail, "not supported by driver"));
  EXPECT_EQ(script.Count(ETHTOOL_STXCSUM), 1u);
  EXPECT_TRUE(script.Done());
}

TEST_CASE("ethtool: legacy STXCSUM that does not stick is reported in notApplied") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP))
      .Expect(ETHTOOL_GTXCSUM, ValueReply(1))
      .Expect(ETHTOOL_STXCSUM, ValueReply(0))
      .Expect(ETHTOOL_GTXCSUM, ValueReply(1));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksumming", false}});
  EXPECT_TRUE(result.ok());
  EXPECT_TRUE(result.value().written);
  EXPECT_EQ(result.value().notApplied.size(), 1u);
  EXPECT_TRUE(result.value().active[0].enable);
}

TEST_CASE("ethtool: legacy STXCSUM EPERM names CAP_NET_ADMIN") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GSSET_INFO, Errno(EOPNOTSUPP))
      .Expect(ETHTOOL_GTXCSUM, ValueReply(1))
      .Expect(ETHTOOL_STXCSUM, Errno(EPERM));
  auto result = fg::ethtool::SetFeatures(script.AsIoctl(), kIf, {{"tx-checksumming", false}});
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EPERM);
  EXPECT_TRUE(Contains(result.error().detail, "CAP_NET_ADMIN"));
}

// ---------------------------------------------------------------- driver info

TEST_CASE("ethtool: drvinfo fields are read bounded and force-terminated") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GDRVINFO, [](uint8_t* command) {
    // Fill everything after cmd with non-NUL bytes: no field is terminated.
    std::memset(command + 4, 'A', 196 - 4);
    std::memcpy(command + 4, "vxlan", 5);
    std::memcpy(command + 36, "0.1", 3);
    std::memcpy(command + 100, "bus", 3);
    return 0;
  });
  auto result = fg::ethtool::GetDriverInfo(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  const DriverInfo& info = result.value();
  EXPECT_EQ(info.driver, "vxlan" + std::string(26, 'A'));
  EXPECT_EQ(info.version, "0.1" + std::string(28, 'A'));
  EXPECT_EQ(info.firmwareVersion, std::string(31, 'A'));
  EXPECT_EQ(info.busInfo, "bus" + std::string(28, 'A'));
}

TEST_CASE("ethtool: drvinfo terminated fields are read as they are") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GDRVINFO, [](uint8_t* command) {
    std::memcpy(command + 4, "vxlan", 6);
    std::memcpy(command + 36, "0.1", 4);
    return 0;
  });
  auto result = fg::ethtool::GetDriverInfo(script.AsIoctl(), kIf);
  EXPECT_TRUE(result.ok());
  EXPECT_EQ(result.value().driver, "vxlan");
  EXPECT_EQ(result.value().version, "0.1");
  EXPECT_EQ(result.value().firmwareVersion, "");
  EXPECT_EQ(result.value().busInfo, "");
}

TEST_CASE("ethtool: drvinfo error surfaced with the command name") {
  ScriptedIoctl script;
  script.Expect(ETHTOOL_GDRVINFO, Errno(EOPNOTSUPP));
  auto result = fg::ethtool::GetDriverInfo(script.AsIoctl(), kIf);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EOPNOTSUPP);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GDRVINFO)");
  EXPECT_EQ(result.error().interface, kIf);
}

// ---------------------------------------------------------------- SocketIoctl
// Unprivileged and read-only: no interface is created, changed or even found.

TEST_CASE("ethtool: SocketIoctl refuses names that do not fit ifr_name, without a syscall") {
  // fd -1 would give EBADF if the syscall were made.
  Ioctl ioctl = fg::ethtool::SocketIoctl(-1);
  uint32_t command[64] = {ETHTOOL_GDRVINFO};
  EXPECT_EQ(ioctl(std::string(16, 'a'), command), -EINVAL);
  EXPECT_EQ(ioctl("", command), -EINVAL);
  EXPECT_EQ(ioctl(std::string("a\0b", 3), command), -EINVAL);
  EXPECT_EQ(ioctl("lo", command), -EBADF);
}

TEST_CASE("ethtool: SocketIoctl on a missing device gives ENODEV") {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  EXPECT_TRUE(fd >= 0);
  auto result = fg::ethtool::GetDriverInfo(fg::ethtool::SocketIoctl(fd), "fgx-absent-9z");
  close(fd);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, ENODEV);
  EXPECT_EQ(result.error().syscall, "ioctl(ETHTOOL_GDRVINFO)");
}
