"""A process that starts vLLM engines one after another, on request, so that vLLM is imported once
per session and side (harness.Hosts), not once per engine.

Each request is one JSON line on stdin: {"model", "out", "log", "env", "extra"} and, optionally,
"prompts" (run_llm.generate's). The host points its
stdout and stderr at the request's log (the engine core and workers that LLM() spawns inherit them),
replaces its environment by the request's, runs run_llm.generate, writes the ids
to "out", shuts the engine down (its processes gone before the next request), and answers one JSON
line {"rc": 0 | 1} on the pipe it was given (argv[1]). An engine that fails ends the host after
the answer: whatever vLLM left behind in a failed start-up never reaches the next engine.

Every engine is still vLLM's default topology (engine core and workers in processes of their own);
only the process that calls LLM() is reused, and it holds no model (the plan is made in workers).
"""

import json
import os
import sys
import traceback


def serve(reply_fd: int) -> None:
    from multiprocessing import resource_tracker

    import vllm  # noqa: F401 - imported while the session does other work, not during the first request

    from run_llm import generate

    # started now, so that it writes to the host's own log, not to the first request's
    resource_tracker.ensure_running()
    host_log = os.dup(1)
    replies = os.fdopen(reply_fd, "w", buffering=1)
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush(), sys.stderr.flush()
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1), os.dup2(log, 2)
        os.close(log)
        os.environ.clear()
        os.environ.update(req["env"])  # the whole environment the engine's processes get
        answered = []

        def answer(ids):
            with open(req["out"], "w") as f:
                json.dump({"ids": ids}, f)
            sys.stdout.flush(), sys.stderr.flush()
            replies.write(json.dumps({"rc": 0}) + "\n")
            answered.append(True)

        try:
            generate(req["model"], req["extra"], answer, req.get("prompts"))
        except BaseException:  # noqa: BLE001 - the log gets it, the test reads the log
            traceback.print_exc()
            if not answered:
                sys.stdout.flush(), sys.stderr.flush()
                replies.write(json.dumps({"rc": 1}) + "\n")
                os._exit(1)
            # the engine ran and was answered; its shutdown failed: said in its log, the host goes on
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(host_log, 1), os.dup2(host_log, 2)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
