// Generating the test certificates: EC P-256 keys (fast), a config file of our own so the
// system's openssl.cnf cannot change the extensions, and validity of two days.
#include "support/test_certificates.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "gtest/gtest.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

constexpr char kConfig[] = R"(
[req]
distinguished_name = dn
prompt = no
[dn]
CN = Ember test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
authorityKeyIdentifier = keyid
[client]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
)";

bool Run(std::vector<std::string> argv) {
  argv.insert(argv.begin(), EMBER_OPENSSL_CLI);
  RunResult result = RunProgram(argv, std::chrono::seconds(30));
  if (result.exit_code != 0) {
    ADD_FAILURE() << "openssl " << argv[1] << " failed: " << result.output;
    return false;
  }
  return true;
}

bool MakeCa(const std::string& dir, const std::string& name) {
  return Run({"req", "-x509", "-config", dir + "/openssl.cnf", "-extensions", "ca", "-newkey", "ec",
              "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
              dir + "/" + name + ".key", "-out", dir + "/" + name + ".crt", "-days", "2", "-subj",
              "/CN=Ember test " + name});
}

bool MakeLeaf(const std::string& dir, const std::string& name, const std::string& extensions,
              const std::string& serial) {
  return Run({"req", "-new", "-config", dir + "/openssl.cnf", "-newkey", "ec", "-pkeyopt",
              "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir + "/" + name + ".key",
              "-out", dir + "/" + name + ".csr", "-subj", "/CN=localhost"}) &&
         Run({"x509", "-req", "-in", dir + "/" + name + ".csr", "-CA", dir + "/ca.crt", "-CAkey",
              dir + "/ca.key", "-set_serial", serial, "-days", "2", "-extfile",
              dir + "/openssl.cnf", "-extensions", extensions, "-out", dir + "/" + name + ".crt"});
}

// Removes the directory when the test process ends.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

const TestCertificates* GetTestCertificates() {
  static TempDir dir;
  static std::optional<TestCertificates> certificates = []() -> std::optional<TestCertificates> {
    std::string pattern = (std::filesystem::temp_directory_path() / "ember-certs-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << " failed";
      return std::nullopt;
    }
    dir.path = pattern;
    std::ofstream(dir.path + "/openssl.cnf") << kConfig;
    if (!MakeCa(dir.path, "ca") || !MakeCa(dir.path, "other-ca") ||
        !MakeLeaf(dir.path, "server", "server", "2") ||
        !MakeLeaf(dir.path, "client", "client", "3")) {
      return std::nullopt;
    }
    return TestCertificates{
        .ca_cert = dir.path + "/ca.crt",
        .server_cert = dir.path + "/server.crt",
        .server_key = dir.path + "/server.key",
        .client_cert = dir.path + "/client.crt",
        .client_key = dir.path + "/client.key",
        .other_ca_cert = dir.path + "/other-ca.crt",
    };
  }();
  return certificates ? &*certificates : nullptr;
}

}  // namespace ember::testing
