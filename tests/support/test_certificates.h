// TLS material for the tests that serve TLS on loopback (OTLP receivers, the Kubernetes API
// server), made once per test process with the openssl CLI in a
// temporary directory: a CA, a server certificate it signed (for localhost and 127.0.0.1), a
// client certificate it signed (for mTLS), and an unrelated CA that trusts neither.
#pragma once

#include <string>

namespace ember::testing {

struct TestCertificates {
  // Paths.
  std::string ca_cert;
  std::string server_cert;
  std::string server_key;
  std::string client_cert;
  std::string client_key;
  std::string other_ca_cert;
};

// nullptr when openssl failed (the failure is reported to the running test, with its output).
const TestCertificates* GetTestCertificates();

// A file's contents ("" when unreadable).
std::string ReadFile(const std::string& path);

}  // namespace ember::testing
