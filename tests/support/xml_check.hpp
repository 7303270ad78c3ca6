#pragma once
// A minimal XML well-formedness check for the SVG files squall writes: one root element,
// every tag closed in order, attribute values quoted, no duplicate attribute in a tag, entity
// references limited to the five predefined ones and numeric ones. Not a full XML parser
// (no DTDs, CDATA or namespaces checked), enough to catch a broken writer.
#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace squall::test {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;
};

struct XmlCheck {
  bool ok = false;
  std::string error;                  // where it went wrong, when !ok
  std::string root;                   // the root element's name
  std::vector<XmlElement> elements;   // every element, in document order
  int count(const std::string& name) const {
    int n = 0;
    for (const auto& e : elements) n += e.name == name;
    return n;
  }
};

inline bool xml_entities_ok(const std::string& text) {
  for (size_t i = text.find('&'); i != std::string::npos; i = text.find('&', i + 1)) {
    const size_t semi = text.find(';', i);
    if (semi == std::string::npos) return false;
    const std::string ent = text.substr(i + 1, semi - i - 1);
    if (ent == "lt" || ent == "gt" || ent == "amp" || ent == "quot" || ent == "apos") continue;
    if (ent.size() > 1 && ent[0] == '#') continue;
    return false;
  }
  return true;
}

inline XmlCheck check_xml(const std::string& doc) {
  XmlCheck r;
  std::vector<std::string> open;
  bool root_closed = false;
  size_t i = 0;
  auto fail = [&](const std::string& what) {
    r.ok = false;
    r.error = what + " at byte " + std::to_string(i);
    return r;
  };
  while (i < doc.size()) {
    const size_t lt = doc.find('<', i);
    const std::string text = doc.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    if (!xml_entities_ok(text)) return fail("bad entity in text");
    if (open.empty()) {
      for (char c : text)
        if (!std::isspace(static_cast<unsigned char>(c))) return fail("text outside the root element");
    }
    if (lt == std::string::npos) break;
    i = lt;
    if (doc.compare(i, 4, "<!--") == 0) {
      const size_t end = doc.find("-->", i);
      if (end == std::string::npos) return fail("unclosed comment");
      i = end + 3;
      continue;
    }
    if (doc.compare(i, 2, "<?") == 0) {
      const size_t end = doc.find("?>", i);
      if (end == std::string::npos) return fail("unclosed processing instruction");
      i = end + 2;
      continue;
    }
    const bool closing = doc.compare(i, 2, "</") == 0;
    size_t p = i + (closing ? 2 : 1);
    std::string name;
    while (p < doc.size() && (std::isalnum(static_cast<unsigned char>(doc[p])) || doc[p] == '-' || doc[p] == ':' ||
                              doc[p] == '_' || doc[p] == '.'))
      name += doc[p++];
    if (name.empty()) return fail("a tag without a name");
    if (closing) {
      while (p < doc.size() && std::isspace(static_cast<unsigned char>(doc[p]))) ++p;
      if (p >= doc.size() || doc[p] != '>') return fail("bad closing tag </" + name);
      if (open.empty() || open.back() != name)
        return fail("</" + name + "> closes <" + (open.empty() ? std::string("nothing") : open.back()) + ">");
      open.pop_back();
      if (open.empty()) root_closed = true;
      i = p + 1;
      continue;
    }
    if (root_closed) return fail("a second root element <" + name + ">");
    XmlElement element{name, {}};
    bool self_closing = false;
    for (;;) {
      while (p < doc.size() && std::isspace(static_cast<unsigned char>(doc[p]))) ++p;
      if (p >= doc.size()) return fail("unclosed tag <" + name);
      if (doc[p] == '>') {
        ++p;
        break;
      }
      if (doc.compare(p, 2, "/>") == 0) {
        p += 2;
        self_closing = true;
        break;
      }
      std::string attr;
      while (p < doc.size() && !std::isspace(static_cast<unsigned char>(doc[p])) && doc[p] != '=' && doc[p] != '>' &&
             doc[p] != '/')
        attr += doc[p++];
      if (attr.empty() || p >= doc.size() || doc[p] != '=') return fail("attribute without a value in <" + name);
      ++p;
      if (p >= doc.size() || (doc[p] != '"' && doc[p] != '\'')) return fail("unquoted attribute " + attr);
      const char q = doc[p++];
      const size_t end = doc.find(q, p);
      if (end == std::string::npos) return fail("unterminated attribute " + attr);
      const std::string value = doc.substr(p, end - p);
      if (value.find('<') != std::string::npos || !xml_entities_ok(value)) return fail("bad attribute value " + attr);
      if (!element.attributes.emplace(attr, value).second) return fail("duplicate attribute " + attr);
      p = end + 1;
    }
    if (r.elements.empty()) r.root = name;
    r.elements.push_back(element);
    if (!self_closing) open.push_back(name);
    else if (open.empty()) root_closed = true;
    i = p;
  }
  if (!open.empty()) return fail("<" + open.back() + "> never closed");
  if (r.elements.empty()) return fail("no element");
  r.ok = true;
  return r;
}

// The number of "x,y" pairs in a polyline's points attribute.
inline int polyline_point_count(const std::string& points) {
  int n = 0;
  bool in_token = false;
  for (char c : points) {
    const bool space = std::isspace(static_cast<unsigned char>(c));
    if (!space && !in_token) ++n;
    in_token = !space;
  }
  return n;
}

}  // namespace squall::test
