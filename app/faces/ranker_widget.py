"""A drag-and-drop ranking widget built on Gradio 6's gr.HTML (no front-end build).

Drag a card to reorder (ranks become 1..K top to bottom), or focus a card (Tab or click) and press a number key to
give it that rank: two cards with the same number are a tie. Arrow Up/Down move the focused card.

When the value asks for strengths (`ask`), a row between each group of equal rank and the next one down asks how
much better the group above is (annotation/questions/strength.py's four levels): click a level, or focus the row (Tab)
and press 0-3. Reordering clears them (the steps are new).

Each card has the campaign's tags (`tag_names`: unsafe, factually wrong, off topic, other; store/guidelines.py):
click one to mark the response, or focus the card and press its key (u, f, o, x); again takes it off. Tags stay
with a response when the order changes.

When the value allows an edit (`edit_ok`, `rlhf ui --edits`), a text box under the cards takes the annotator's
correction of the best response (store/edits.py); "Start from the best" copies the top card's text into it. The box
is built once and kept across renders, so typing in it keeps its focus and caret.

Any other question asked as one choice (annotation/questions/: a registered question with `widget_choices`; the
value's `more` lists them) gets a row of buttons under the edit box, titled by the question: click a choice to
answer, again to take it back; the answer is the value's key of the question's name. Reordering clears them, as
it clears the strengths: they were said of the order before (which response is best, how sure).

A card shows the item's `html`: the response as Markdown, rendered on the server with the response's own HTML
escaped and only http(s)/mailto links (annotation/response_html.py). Without it the text goes in as textContent."""

from __future__ import annotations

HTML = (
    "<div class='ranker' role='list' aria-label='Responses, best first'></div><div class='edit-box'></div>"
    "<div class='more'></div>"
)

CSS = """
.ranker { display: flex; flex-direction: column; gap: 8px; }
.card { display: flex; gap: 12px; align-items: flex-start; padding: 10px 12px; border: 1px solid #d0d5dd;
        border-radius: 8px; background: var(--background-fill-primary, #fff); cursor: grab; }
.card:focus { outline: 2px solid #f97316; outline-offset: 1px; }
.card.dragging { opacity: 0.4; }
.card.over { border-top: 3px solid #f97316; }
.rank { min-width: 2em; height: 2em; border-radius: 1em; background: #f97316; color: #fff; font-weight: 700;
        display: flex; align-items: center; justify-content: center; flex-shrink: 0; }
.tie .rank { background: #7c3aed; }
.text { line-height: 1.45; min-width: 0; overflow-wrap: anywhere; }
.text > :first-child { margin-top: 0; }
.text > :last-child { margin-bottom: 0; }
.text pre { white-space: pre-wrap; padding: 8px; border-radius: 6px; background: var(--code-background-fill, #f3f4f6); }
.gap { display: flex; gap: 6px; align-items: center; padding: 2px 12px; font-size: 0.85em; color: #667085; }
.gap:focus { outline: 2px solid #f97316; outline-offset: 1px; border-radius: 6px; }
.gap button { border: 1px solid #d0d5dd; border-radius: 12px; padding: 1px 10px; background: transparent;
              cursor: pointer; font-size: 0.95em; }
.gap button.on { background: #f97316; border-color: #f97316; color: #fff; }
.body { display: flex; flex-direction: column; gap: 6px; min-width: 0; flex: 1; }
.tags { display: flex; flex-wrap: wrap; gap: 4px; font-size: 0.8em; }
.tags button { border: 1px solid #d0d5dd; border-radius: 10px; padding: 0 8px; background: transparent; color: #667085;
               cursor: pointer; }
.tags button.on { background: #b42318; border-color: #b42318; color: #fff; }
.edit-box { display: flex; flex-direction: column; gap: 6px; margin-top: 10px; }
.edit-box textarea { width: 100%; min-height: 6em; padding: 8px; border: 1px solid #d0d5dd; border-radius: 8px;
                     font: inherit; box-sizing: border-box; }
.edit-box textarea:focus, .edit-box button:focus { outline: 2px solid #f97316; outline-offset: 1px; }
.edit-box button { align-self: flex-start; border: 1px solid #d0d5dd; border-radius: 12px; padding: 2px 12px;
                   background: transparent; cursor: pointer; }
.more { display: flex; flex-direction: column; gap: 6px; margin-top: 10px; }
.more .question { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; }
.more button { border: 1px solid #d0d5dd; border-radius: 12px; padding: 1px 10px; background: transparent;
               cursor: pointer; }
.more button.on { background: #f97316; border-color: #f97316; color: #fff; }
.more button:focus { outline: 2px solid #f97316; outline-offset: 1px; }
"""

JS = """
const root = () => element.querySelector('.ranker');
function items() { return ((props.value || {}).items || []).map(x => ({...x})); }
function sorted(list) { return list.sort((a, b) => a.rank - b.rank || a.pos - b.pos); }
const LEVELS = ['negligibly or unsure', 'slightly better', 'better', 'significantly better'];
function groupsOf(list) { return new Set(list.map(x => x.rank)).size; }
function commit(list, focusId) {
  const old = props.value || {};
  const steps = old.ask ? Array(Math.max(groupsOf(list) - 1, 0)).fill(null) : (old.strengths || []);
  const cleared = Object.fromEntries((old.more || []).map(q => [q.name, null]));  // said of the order before
  props.value = {...old, ...cleared, items: list, strengths: steps};
  trigger('change');
  setTimeout(() => { render(); renderMore(); if (focusId !== undefined) focusCard(focusId); }, 0);
}
function focusCard(id) {
  const card = root() && root().querySelector(`[data-id="${id}"]`);
  if (card) card.focus();
}
const TAG_KEYS = {u: 'unsafe', f: 'factually wrong', o: 'off topic', x: 'other'};
function toggleTag(id, tag) {
  const v = props.value || {};
  const list = (v.items || []).map(x => {
    if (String(x.id) !== String(id)) return {...x};
    const has = (x.tags || []).includes(tag);
    return {...x, tags: has ? x.tags.filter(t => t !== tag) : [...(x.tags || []), tag]};
  });
  props.value = {...v, items: list};
  trigger('change');
  setTimeout(() => { render(); focusCard(id); }, 0);
}
function tagRow(it) {
  const row = document.createElement('div'); row.className = 'tags';
  ((props.value || {}).tag_names || []).forEach(tag => {
    const key = Object.keys(TAG_KEYS).find(k => TAG_KEYS[k] === tag);
    const on = (it.tags || []).includes(tag);
    const b = document.createElement('button');
    b.type = 'button'; b.tabIndex = -1; b.className = on ? 'on' : ''; b.dataset.tag = tag;
    b.setAttribute('aria-pressed', on ? 'true' : 'false');
    b.textContent = key ? `${tag} (${key})` : tag;
    b.addEventListener('click', e => { e.stopPropagation(); toggleTag(it.id, tag); });
    row.appendChild(b);
  });
  return row;
}
function strictFrom(order) { return order.map((it, i) => ({...it, rank: i + 1})); }
function setStrength(g, level) {
  const v = props.value || {};
  const steps = (v.strengths || []).slice();
  steps[g] = level;
  props.value = {...v, strengths: steps};
  trigger('change');
  setTimeout(() => {
    render();
    const gap = root() && root().querySelector(`[data-gap="${g}"]`);
    if (gap) gap.focus();
  }, 0);
}
function gapRow(g, level) {
  const row = document.createElement('div');
  row.className = 'gap'; row.tabIndex = 0; row.dataset.gap = g; row.setAttribute('role', 'radiogroup');
  row.setAttribute('aria-label', 'How much better is the response above? 0-3');
  row.append('above is ');
  LEVELS.forEach((name, k) => {
    const b = document.createElement('button');
    b.type = 'button'; b.textContent = `${k} ${name}`; b.className = level === k ? 'on' : '';
    b.addEventListener('click', () => setStrength(g, k));
    row.appendChild(b);
  });
  row.addEventListener('keydown', e => {
    if (/^[0-3]$/.test(e.key)) { e.preventDefault(); setStrength(g, Number(e.key)); }
  });
  return row;
}
function render() {
  const box = root();
  if (!box) return;
  const list = sorted(items());
  const counts = {};
  list.forEach(it => counts[it.rank] = (counts[it.rank] || 0) + 1);
  const ask = !!(props.value || {}).ask;
  const steps = (props.value || {}).strengths || [];
  const ranks = [...new Set(list.map(x => x.rank))];
  box.innerHTML = '';
  list.forEach((it, n) => {
    if (ask && n > 0 && list[n - 1].rank !== it.rank) {
      const g = ranks.indexOf(list[n - 1].rank);
      box.appendChild(gapRow(g, steps[g] === undefined ? null : steps[g]));
    }
    const card = document.createElement('div');
    card.className = 'card' + (counts[it.rank] > 1 ? ' tie' : '');
    card.tabIndex = 0; card.draggable = true; card.dataset.id = it.id; card.setAttribute('role', 'listitem');
    const badge = document.createElement('span'); badge.className = 'rank'; badge.textContent = it.rank;
    const text = document.createElement('div'); text.className = 'text';
    if (typeof it.html === 'string') text.innerHTML = it.html; else text.textContent = it.text;
    const body = document.createElement('div'); body.className = 'body';
    body.append(text, tagRow(it));
    card.append(badge, body);
    card.addEventListener('dragstart', e => { e.dataTransfer.setData('text/plain', String(it.id));
                                              card.classList.add('dragging'); });
    card.addEventListener('dragend', () => card.classList.remove('dragging'));
    card.addEventListener('dragover', e => { e.preventDefault(); card.classList.add('over'); });
    card.addEventListener('dragleave', () => card.classList.remove('over'));
    card.addEventListener('drop', e => {
      e.preventDefault(); card.classList.remove('over');
      const from = String(e.dataTransfer.getData('text/plain'));
      if (from === String(it.id)) return;
      const order = sorted(items());
      const moving = order.find(x => String(x.id) === from);
      const rest = order.filter(x => String(x.id) !== from);
      rest.splice(rest.findIndex(x => String(x.id) === String(it.id)), 0, moving);
      commit(strictFrom(rest), moving.id);
    });
    card.addEventListener('keydown', e => {
      const k = list.length;
      if (/^[1-9]$/.test(e.key) && Number(e.key) <= k) {
        e.preventDefault();
        commit(items().map(x => String(x.id) === String(it.id) ? {...x, rank: Number(e.key)} : x), it.id);
      } else if (e.key === 'ArrowUp' || e.key === 'ArrowDown') {
        e.preventDefault();
        const order = sorted(items());
        const i = order.findIndex(x => String(x.id) === String(it.id));
        const j = e.key === 'ArrowUp' ? i - 1 : i + 1;
        if (j < 0 || j >= order.length) return;
        [order[i], order[j]] = [order[j], order[i]];
        commit(strictFrom(order), it.id);
      } else if (TAG_KEYS[e.key.toLowerCase()] && !e.ctrlKey && !e.metaKey && !e.altKey) {
        e.preventDefault();  // Shift or Caps Lock: the same tag
        toggleTag(it.id, TAG_KEYS[e.key.toLowerCase()]);
      }
    });
    box.appendChild(card);
  });
}
let typing = false;  // a keystroke in the edit box changes only the edit: the cards are not rebuilt for it
function setEdit(text) {
  typing = true;
  props.value = {...(props.value || {}), edit: text};
  trigger('change');
  setTimeout(() => { typing = false; }, 0);  // whether or not the watch below saw this change
}
function renderEdit() {
  const host = element.querySelector('.edit-box');
  if (!host) return;
  const v = props.value || {};
  if (!v.edit_ok || !(v.items || []).length) { host.innerHTML = ''; return; }
  let box = host.querySelector('textarea');
  if (!box) {
    const label = document.createElement('label');
    label.textContent = 'Your version of the best response (optional): stored as a response of its own, ranked first';
    const start = document.createElement('button');
    start.type = 'button'; start.className = 'edit-start'; start.textContent = 'Start from the best';
    box = document.createElement('textarea');
    box.setAttribute('aria-label', 'Your version of the best response (optional)');
    box.addEventListener('input', () => setEdit(box.value));
    start.addEventListener('click', () => {
      const best = sorted(items())[0];
      if (!best) return;
      box.value = best.text; setEdit(box.value); box.focus();
      box.setSelectionRange(box.value.length, box.value.length);
    });
    host.append(label, start, box);
  }
  if ((v.edit || '') !== box.value) box.value = v.edit || '';
  const top = sorted(items());
  const tied = top.length > 1 && top[0].rank === top[1].rank;
  const start = host.querySelector('.edit-start');
  start.disabled = tied;  // the server takes an edit of one best response only
  start.title = tied ? 'Rank one response best to edit it' : '';
}
function renderMore() {
  const host = element.querySelector('.more');
  if (!host) return;
  const v = props.value || {};
  host.innerHTML = '';
  if (!(v.items || []).length) return;
  (v.more || []).forEach(q => {
    const row = document.createElement('div');
    row.className = 'question'; row.dataset.question = q.name; row.setAttribute('role', 'group');
    row.setAttribute('aria-label', q.title);
    const label = document.createElement('span'); label.textContent = q.title;
    row.appendChild(label);
    q.choices.forEach(choice => {
      const on = v[q.name] === choice;
      const b = document.createElement('button');
      b.type = 'button'; b.textContent = choice; b.className = on ? 'on' : '';
      b.setAttribute('aria-pressed', on ? 'true' : 'false');
      b.addEventListener('click', () => {
        props.value = {...(props.value || {}), [q.name]: on ? null : choice};
        trigger('change');
        setTimeout(() => {
          renderMore();
          const row = host.querySelector(`[data-question="${CSS.escape(q.name)}"]`);
          const again = row && row.querySelectorAll('button')[q.choices.indexOf(choice)];
          if (again) again.focus();
        }, 0);
      });
      row.appendChild(b);
    });
    host.appendChild(row);
  });
}
render();
renderEdit();
renderMore();
watch('value', () => { if (!typing) render(); renderEdit(); renderMore(); });
"""


def ranker(**kwargs):
    import gradio as gr

    return gr.HTML(value={"items": []}, html_template=HTML, css_template=CSS, js_on_load=JS, **kwargs)
