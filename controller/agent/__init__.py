"""The tool loop an API model works in: it reads skills on demand, evaluates drafts through the harness, reads
profiles and submits candidates, every turn archived before the next is sent.

- transcript: the provider-neutral record of a conversation (turns, tool calls, tool results, usage);
- tools: the tools a request allows (their schemas) and the ToolBox that answers them, inside the request's bounds;
- journal: where turns are kept (the archive's ``agent_turns``, or memory), so a killed run resumes and a replay
  replays a whole conversation;
- tool_loop: the bounded loop itself, over any ``ChatModel`` (providers/anthropic.py, providers/openai.py);
- salvage: a kernel the model wrote into its text answer instead of calling submit_kernel, recovered.
"""
