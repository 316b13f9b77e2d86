"""The Compare chat's share of the app's queue: one reply pair is sampled at a time (concurrency id CHAT), each
login has at most one chat request waiting, and chat requests take at most half the queue. A user who sends chat
requests as fast as they can therefore holds two queue places at most, and never fills the queue the annotators'
submits go through (a full queue refuses every request, submits included). Every other event is marked on the
chat worker's AppActivity while it runs, so the chat's child waits for it (app/jobs/chat_worker.py)."""

from __future__ import annotations

CHAT = "chat"  # the concurrency id of the Compare tab's sampling events


def chat_refusal(waiting: list, username: str | None, session: str, queue_size: int) -> str | None:
    """Why a new chat request is refused, or None. waiting: the chat events in the queue (objects with .username
    and .session_hash); a login is its name under --auth, else its page session."""
    mine = sum(1 for e in waiting if (e.username == username if username else e.session_hash == session))
    if mine:
        return "your Compare request is still waiting: one at a time (press Stop to drop it)"
    if len(waiting) >= max(1, queue_size // 2):
        return f"Compare is busy ({len(waiting)} requests waiting); try again in a minute"
    return None


def share_the_queue(demo, queue_size: int, activity=None) -> None:
    """Wrap the Blocks' queue so each chat request is checked by chat_refusal before it is queued, and (with an
    AppActivity) every other event is marked on it while it runs."""
    queue = demo._queue
    push = queue.push

    async def fair_push(body, request, username):
        # the app's own event table, not the session's: Gradio's get_fn copies the whole Blocks config into a new
        # session's state, about 30 ms, which a refusal should not cost (it was 29% of the app's CPU under a hammer)
        fn = demo.fns.get(body.fn_index) if body.fn_index is not None else None
        if fn is not None and fn.concurrency_id == CHAT:
            group = queue.event_queue_per_concurrency_id.get(CHAT)
            waiting = list(group.queue) if group is not None else []
            refused = chat_refusal(waiting, username, body.session_hash or "", queue_size)
            if refused:
                return False, refused, "error"
        return await push(body, request, username)

    queue.push = fair_push

    if activity is None:
        return
    process = queue.process_events

    async def marked(events, batch, begin_time, fn):
        if fn.concurrency_id == CHAT:
            return await process(events, batch, begin_time, fn)
        activity.begin()
        try:
            return await process(events, batch, begin_time, fn)
        finally:
            activity.end()

    queue.process_events = marked
