// Which capabilities the agent requires, warns about and keeps, on kernels with and without
// CAP_BPF/CAP_PERFMON (5.8) and CAP_CHECKPOINT_RESTORE (5.9).
#include "agent/capability_policy.h"

#include <linux/capability.h>

#include <algorithm>

#include "gtest/gtest.h"

namespace ember {
namespace {

constexpr int kPerfmon = 38;
constexpr int kBpf = 39;
constexpr int kCheckpointRestore = 40;
constexpr int kLinux6 = 40;   // cap_last_cap of 5.9 and later
constexpr int kLinux57 = 37;  // cap_last_cap of 5.7 (CAP_AUDIT_READ)

CapabilityMask Caps(std::initializer_list<int> caps) {
  CapabilityMask mask = 0;
  for (int cap : caps) mask |= CapabilityMask{1} << cap;
  return mask;
}

const CapabilityMask kDocumented = Caps({kBpf, kPerfmon, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
                                         CAP_SYSLOG, CAP_SYS_RESOURCE, CAP_SETPCAP});

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

TEST(CapabilityPolicyTest, TheDocumentedSetIsEnough) {
  CapabilityAssessment result = AssessCapabilities(kDocumented, kLinux6);
  EXPECT_EQ(result.error, "");
  EXPECT_TRUE(result.warnings.empty());
  EXPECT_EQ(AssessCapabilities(~CapabilityMask{0}, kLinux6).error, "");  // root
}

TEST(CapabilityPolicyTest, EachMissingRequiredCapabilityIsNamedOnOneLine) {
  for (int cap : {kBpf, kPerfmon, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH}) {
    CapabilityAssessment result = AssessCapabilities(kDocumented & ~Caps({cap}), kLinux6);
    std::string name = CapabilityNames(Caps({cap}));
    EXPECT_EQ(result.error.rfind("missing capability " + name + " (needed to ", 0), 0u)
        << result.error;
    EXPECT_NE(result.error.find("; run as root or grant it"), std::string::npos) << result.error;
    EXPECT_EQ(Lines(result.error), 0);
  }
  CapabilityAssessment none = AssessCapabilities(0, kLinux6);
  EXPECT_EQ(none.error.rfind("missing capabilities CAP_BPF (", 0), 0u) << none.error;
  for (const char* name : {"CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}) {
    EXPECT_NE(none.error.find(name), std::string::npos) << none.error;
  }
}

TEST(CapabilityPolicyTest, SysAdminStandsInForBpfAndPerfmon) {
  CapabilityMask admin = Caps({CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_SYSLOG});
  EXPECT_EQ(AssessCapabilities(admin, kLinux6).error, "");
  EXPECT_EQ(AssessCapabilities(admin, kLinux57).error, "");
  // Before 5.8 there is nothing else to grant.
  CapabilityAssessment old = AssessCapabilities(kDocumented, kLinux57);
  EXPECT_EQ(old.error.rfind("missing capability CAP_SYS_ADMIN (", 0), 0u) << old.error;
}

TEST(CapabilityPolicyTest, MissingSyslogIsAWarning) {
  CapabilityAssessment result = AssessCapabilities(kDocumented & ~Caps({CAP_SYSLOG}), kLinux6);
  EXPECT_EQ(result.error, "");
  ASSERT_EQ(result.warnings.size(), 1u);
  EXPECT_NE(result.warnings[0].find("CAP_SYSLOG"), std::string::npos);
  EXPECT_NE(result.warnings[0].find("kernel frames stay unnamed"), std::string::npos);
}

TEST(CapabilityPolicyTest, KeepsOnlyWhatSymbolizationNeeds) {
  EXPECT_EQ(CapabilitiesToKeep(kDocumented, kLinux6, false),
            Caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH}));
  EXPECT_EQ(CapabilitiesToKeep(kDocumented | Caps({kCheckpointRestore}), kLinux6, false),
            Caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, kCheckpointRestore}));
  // Root keeps the same, not CAP_SYS_ADMIN.
  EXPECT_EQ(CapabilitiesToKeep(~CapabilityMask{0}, kLinux6, false),
            Caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, kCheckpointRestore}));
}

TEST(CapabilityPolicyTest, KeepsTheBpfCapabilityWhenMapsNeedIt) {
  EXPECT_EQ(CapabilitiesToKeep(kDocumented, kLinux6, true),
            Caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, kBpf}));
  EXPECT_EQ(CapabilitiesToKeep(~CapabilityMask{0}, kLinux6, true),
            Caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, kCheckpointRestore, kBpf}));
  EXPECT_EQ(CapabilitiesToKeep(~CapabilityMask{0} >> 24, kLinux57, true),
            Caps({CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN}));
}

TEST(CapabilityPolicyTest, NamesAreTheKernelsInCapabilityOrder) {
  EXPECT_EQ(CapabilityNames(Caps({kBpf, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH})),
            "CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_BPF");
  EXPECT_EQ(CapabilityNames(0), "none");
  EXPECT_EQ(CapabilityNames(Caps({63})), "CAP_63");
}

}  // namespace
}  // namespace ember
