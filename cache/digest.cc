#include "cache/digest.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <memory>

namespace kiln::cache {

Digest Sha256(const void* data, size_t size) {
  Digest out;
  unsigned int len = 0;
  EVP_Digest(data, size, out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string DigestHex(const Digest& d) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * d.size(), '0');
  for (size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
  return out;
}

MacIv RandomMacIv() {
  MacIv iv{};
  RAND_bytes(iv.data(), static_cast<int>(iv.size()));
  return iv;
}

std::optional<MacTag> Gmac(const Digest& key, const MacIv& iv,
                           std::initializer_list<std::string_view> parts) {
  // Fetched once: the lookup goes through OpenSSL's provider tables.
  static EVP_MAC* const gmac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  if (gmac == nullptr) return std::nullopt;
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(gmac),
                                                                 &EVP_MAC_CTX_free);
  char cipher[] = "AES-256-GCM";
  MacIv nonce = iv;
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, nonce.data(), nonce.size()),
      OSSL_PARAM_construct_end()};
  if (ctx == nullptr || EVP_MAC_init(ctx.get(), key.data(), key.size(), params) != 1) {
    return std::nullopt;
  }
  for (std::string_view part : parts) {
    if (EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()),
                       part.size()) != 1) {
      return std::nullopt;
    }
  }
  MacTag tag{};
  size_t len = 0;
  if (EVP_MAC_final(ctx.get(), tag.data(), &len, tag.size()) != 1 || len != tag.size()) {
    return std::nullopt;
  }
  return tag;
}

bool TagsEqual(const MacTag& a, const MacTag& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kiln::cache
