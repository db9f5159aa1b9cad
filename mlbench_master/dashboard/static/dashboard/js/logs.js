// A run's stdout/stderr, followed by offset: each request asks only for what came after the
// last chunk already shown, so nothing is downloaded twice. Rank and stream filters work on
// what is held in the page.

import { api } from "./api.js";

const MAX_CHARS = 2_000_000; // keep the page light when a run prints a lot
const PAGE = 1000;

export class LogFollower {
  constructor(runId, pre, { rank, stream, follow }) {
    this.url = `/api/runs/${runId}/logs/`;
    this.pre = pre;
    this.rankSel = rank;
    this.streamSel = stream;
    this.follow = follow;
    this.offset = 0;
    this.chunks = [];
    this.ranks = new Set();
    this.chars = 0;
    rank.addEventListener("change", () => this.render());
    stream.addEventListener("change", () => this.render());
  }

  matches(c) {
    const r = this.rankSel.value;
    const s = this.streamSel.value;
    return (r === "" || String(c.rank ?? "") === r) && (s === "" || c.stream === s);
  }

  // Fetch chunks after the offset (page after page while the server has more).
  async refresh() {
    let any = false;
    for (let pages = 0; pages < 20; pages += 1) {
      const data = await api(this.url, { params: { offset: this.offset, limit: PAGE } });
      const chunks = data.chunks || [];
      this.offset = data.next_offset ?? this.offset;
      if (!chunks.length) break;
      any = true;
      this.take(chunks);
      if (chunks.length < PAGE) break;
    }
    return any;
  }

  take(chunks) {
    for (const c of chunks) {
      this.chunks.push(c);
      this.chars += (c.text || "").length;
      if (c.rank !== null && c.rank !== undefined && !this.ranks.has(c.rank)) {
        this.ranks.add(c.rank);
        this.addRank(c.rank);
      }
    }
    let dropped = false;
    while (this.chars > MAX_CHARS && this.chunks.length > 1) {
      this.chars -= (this.chunks.shift().text || "").length;
      dropped = true;
    }
    if (dropped) this.render();
    else this.append(chunks.filter((c) => this.matches(c)));
  }

  addRank(rank) {
    const opt = document.createElement("option");
    opt.value = String(rank);
    opt.textContent = `rank ${rank}`;
    const after = [...this.rankSel.options].find((o) => o.value !== "" && Number(o.value) > rank);
    this.rankSel.insertBefore(opt, after || null);
  }

  line(c) {
    const span = document.createElement("span");
    span.className = `log-${c.stream || "stdout"}`;
    const text = c.text || "";
    const label = this.rankSel.value === "" && c.rank !== null && c.rank !== undefined ? `[${c.rank}] ` : "";
    span.textContent = label ? text.replace(/^(?=.)/gm, label) : text;
    if (!text.endsWith("\n")) span.textContent += "\n";
    return span;
  }

  append(chunks) {
    if (!chunks.length) return;
    const frag = document.createDocumentFragment();
    chunks.forEach((c) => frag.append(this.line(c)));
    this.pre.append(frag);
    if (this.follow.checked) this.pre.scrollTop = this.pre.scrollHeight;
  }

  render() {
    this.pre.replaceChildren();
    this.append(this.chunks.filter((c) => this.matches(c)));
  }
}
