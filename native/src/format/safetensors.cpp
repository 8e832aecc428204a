// safetensors reader (mmap, validated) and writer; see format/safetensors.h.
#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace rapid {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// a*b with overflow detection (both non-negative).
bool mul_overflows(uint64_t a, uint64_t b, uint64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}

}  // namespace

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail(path, std::string("mmap failed: ") + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void parse_safetensors(const MappedFile& file, std::vector<TensorView>& out,
                       std::map<std::string, std::string>* metadata) {
  const std::string& path = file.path();
  if (file.size() < 8) fail(path, "truncated file: " + std::to_string(file.size()) + " bytes, header length needs 8");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(file.data()[i]) << (8 * i);
  if (hlen > file.size() - 8)
    fail(path, "header length " + std::to_string(hlen) + " exceeds file size " + std::to_string(file.size()) +
                   " (truncated or not a safetensors file)");
  if (hlen < 2) fail(path, "header length " + std::to_string(hlen) + " too small");
  std::string_view header(reinterpret_cast<const char*>(file.data() + 8), size_t(hlen));
  // The writer may pad with trailing spaces; JSON parse tolerates whitespace.
  Json h;
  try {
    h = Json::parse(header);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!h.is_object()) fail(path, "header is not a JSON object");
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = file.size() - data_start;

  struct Span { uint64_t b, e; size_t idx; };
  std::vector<Span> spans;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (metadata && v.is_object())
        for (const auto& [k, mv] : v.items())
          if (mv.is_string()) (*metadata)[k] = mv.as_string();
      continue;
    }
    auto bad = [&](const std::string& what) { fail(path, "tensor \"" + name + "\": " + what); };
    if (!v.is_object()) bad("entry is not an object");
    const Json* dt = v.find("dtype");
    const Json* sh = v.find("shape");
    const Json* off = v.find("data_offsets");
    if (!dt || !dt->is_string()) bad("missing or non-string dtype");
    if (!sh || !sh->is_array()) bad("missing or non-array shape");
    if (!off || !off->is_array() || off->size() != 2) bad("data_offsets must be [begin, end]");
    TensorView t;
    t.name = name;
    t.file = path;
    if (!try_parse_dtype(dt->as_string(), t.dtype)) bad("unknown dtype \"" + dt->as_string() + "\"");
    uint64_t numel = 1;
    for (const Json& d : sh->array()) {
      if (!d.is_int() || d.as_int() < 0) bad("shape entries must be non-negative integers");
      t.shape.push_back(d.as_int());
      if (mul_overflows(numel, uint64_t(d.as_int()), numel)) bad("shape overflows");
    }
    uint64_t want;
    if (mul_overflows(numel, dtype_size(t.dtype), want)) bad("size overflows");
    const Json& jb = off->at(size_t(0));
    const Json& je = off->at(size_t(1));
    if (!jb.is_int() || !je.is_int() || jb.as_int() < 0 || je.as_int() < 0)
      bad("data_offsets must be non-negative integers");
    uint64_t b = uint64_t(jb.as_int()), e = uint64_t(je.as_int());
    if (e < b) bad("data_offsets end " + std::to_string(e) + " < begin " + std::to_string(b));
    if (e > data_size)
      bad("data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] beyond data size " +
          std::to_string(data_size) + " (truncated file?)");
    if (e - b != want)
      bad("data_offsets span " + std::to_string(e - b) + " bytes but shape " + t.shape_str() + " × " +
          dtype_name(t.dtype) + " needs " + std::to_string(want));
    t.data = file.data() + data_start + b;
    t.nbytes = size_t(want);
    spans.push_back({b, e, out.size()});
    out.push_back(std::move(t));
  }
  // Non-empty byte ranges must not overlap: sort by start, compare with the furthest end so far.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.b < b.b; });
  const Span* far = nullptr;
  for (const Span& sp : spans) {
    if (sp.e == sp.b) continue;
    if (far && sp.b < far->e)
      fail(path, "tensors \"" + out[far->idx].name + "\" and \"" + out[sp.idx].name + "\" overlap");
    if (!far || sp.e > far->e) far = &sp;
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw std::runtime_error(path + ": read error");
  return ss.str();
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {
    ck->dir_ = fs::path(dir).parent_path().string();
    if (ck->dir_.empty()) ck->dir_ = ".";
    files.push_back(dir);
  } else {
    if (!fs::is_directory(dir, ec)) throw std::runtime_error(dir + ": not a directory or file");
    ck->dir_ = dir;
  }
  std::map<std::string, std::string> index_map;  // tensor -> shard path (when index.json)
  if (files.empty()) {
    fs::path index = fs::path(dir) / "model.safetensors.index.json";
    fs::path single = fs::path(dir) / "model.safetensors";
    if (fs::exists(index)) {
      Json j;
      try {
        j = Json::parse(read_text_file(index.string()));
      } catch (const std::exception& e) {
        throw std::runtime_error(index.string() + ": " + e.what());
      }
      const Json* wm = j.find("weight_map");
      if (!wm || !wm->is_object()) throw std::runtime_error(index.string() + ": missing \"weight_map\" object");
      std::set<std::string> shards;
      for (const auto& [name, shard] : wm->items()) {
        if (!shard.is_string()) throw std::runtime_error(index.string() + ": shard of \"" + name + "\" is not a string");
        std::string p = (fs::path(dir) / shard.as_string()).string();
        if (!fs::exists(p))
          throw std::runtime_error(index.string() + ": shard \"" + shard.as_string() + "\" (for tensor \"" + name +
                                   "\") does not exist");
        index_map[name] = p;
        shards.insert(p);
      }
      files.assign(shards.begin(), shards.end());
    } else if (fs::exists(single)) {
      files.push_back(single.string());
    } else {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty()) throw std::runtime_error(dir + ": no .safetensors files (nor model.safetensors.index.json)");
    }
  }
  for (const std::string& f : files) {
    ck->files_.push_back(std::make_unique<MappedFile>(f));
    parse_safetensors(*ck->files_.back(), ck->tensors_, ck->files_.size() == 1 ? &ck->metadata_ : nullptr);
  }
  ck->index_.reserve(ck->tensors_.size());
  for (size_t i = 0; i < ck->tensors_.size(); ++i) {
    auto [it, inserted] = ck->index_.emplace(ck->tensors_[i].name, i);
    if (!inserted)
      throw std::runtime_error(ck->tensors_[i].file + ": duplicate tensor \"" + ck->tensors_[i].name +
                               "\" (also in " + ck->tensors_[it->second].file + ")");
  }
  for (const auto& [name, shard] : index_map) {
    const TensorView* t = ck->find(name);
    if (!t || t->file != shard)
      throw std::runtime_error(shard + ": tensor \"" + name + "\" listed in model.safetensors.index.json is absent");
  }
  return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& Checkpoint::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) throw std::runtime_error("missing tensor " + name + " in " + dir_);
  return *t;
}

size_t Checkpoint::mapped_bytes() const {
  size_t n = 0;
  for (const auto& f : files_) n += f->size();
  return n;
}

Json Checkpoint::config() const {
  std::string p = (fs::path(dir_) / "config.json").string();
  try {
    return Json::parse(read_text_file(p));
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (msg.rfind(p, 0) == 0) throw;
    throw std::runtime_error(p + ": " + msg);
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorData*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorData* a, const TensorData* b) { return a->name < b->name; });
  Json h = Json::make_object();
  if (!metadata.empty()) {
    Json m = Json::make_object();
    for (const auto& [k, v] : metadata) m.set(k, Json(v));
    h.set("__metadata__", std::move(m));
  }
  uint64_t off = 0;
  for (const TensorData* t : order) {
    uint64_t numel = 1;
    for (int64_t d : t->shape) numel *= uint64_t(d);
    if (numel * dtype_size(t->dtype) != t->nbytes)
      throw std::runtime_error(path + ": tensor \"" + t->name + "\" has " + std::to_string(t->nbytes) +
                               " bytes, shape needs " + std::to_string(numel * dtype_size(t->dtype)));
    Json e = Json::make_object();
    e.set("dtype", Json(dtype_name(t->dtype)));
    Json shape = Json::make_array();
    for (int64_t d : t->shape) shape.push(Json(d));
    e.set("shape", std::move(shape));
    Json offs = Json::make_array();
    offs.push(Json(off));
    offs.push(Json(off + t->nbytes));
    e.set("data_offsets", std::move(offs));
    h.set(t->name, std::move(e));
    off += t->nbytes;
  }
  std::string header = h.dump();
  while (header.size() % 8) header += ' ';
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(tmp + ": cannot create: " + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const TensorData* t : order) {
    if (!ok) break;
    ok = t->nbytes == 0 || std::fwrite(t->data, 1, t->nbytes, f) == t->nbytes;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": write failed: " + std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path + ": rename failed: " + ec.message());
}

}  // namespace rapid
