// Site search for a pasted error (docs/troubleshooting.md): mkdocs-material hands the search box's text to its
// search worker, where lunr reads `word:` as a field name (a pasted `carbon-harness: ...`, `error:` or
// `/path/x.log:` makes the whole query invalid: no results), a leading `-` as "must not contain", and every
// one-letter word (`a*`) as a prefix of everything. A query of four or more words is taken for pasted text:
// its punctuation becomes spaces; one-letter words, bare numbers and paths (run-time values) and repeats (a list
// of model names) are dropped; and its first 16 words go to the worker. Shorter queries, lunr syntax included, go through as typed.
(function () {
  "use strict";
  var post = Worker.prototype.postMessage;
  var MAX_TERMS = 16;  // the message leads a paste; what follows (a log's last lines) would outvote it

  function pasted(query) {
    if (query.trim().split(/\s+/).length < 4) {
      return query;
    }
    return query
      .replace(/[^\p{L}\p{N}_.\/]+/gu, " ")
      .split(/\s+/)
      .map(function (term) { return term.replace(/^[.\/]+|[.\/]+$/g, ""); })
      .filter(function (term, i, all) {
        return term.length > 1 && !/^[\d.]+$/.test(term) && term.indexOf("/") < 0 && all.indexOf(term) === i;
      })
      .slice(0, MAX_TERMS)
      .join(" ");
  }

  Worker.prototype.postMessage = function (message) {
    if (message && message.type === 2 && typeof message.data === "string") {  // 2: a search query
      arguments[0] = Object.assign({}, message, { data: pasted(message.data) });
    }
    return post.apply(this, arguments);
  };
})();
