"""pulllog's asyncio clients: Producer, Consumer, Admin, and what they share.

Concurrency, the rule for this package: every task a client starts is owned by an
``asyncio.TaskGroup``, under one supervisor task per client that ``start()`` creates and
``close()`` stops and joins (``pulllog.client.task_scope.TaskScope``, the one helper the
producer, the consumer and the cluster's connections share); no task is left that nothing
awaits or cancels. The Producer's supervisor runs its sender (``pulllog.client.sender``), whose task group owns
the Produce requests in flight, the metadata refreshes and the epoch bumps: leaving it
cancels and joins them all, and the supervisor then closes the connections.

Why asyncio's TaskGroup and not anyio's (which the broker used first):

* It is the standard library's (Python 3.11+): no dependency for the people embedding a
  client, and it is what their asyncio applications already run.
* Its cancellation is edge-triggered: ``task.cancel()`` delivers one CancelledError, which
  a client's shutdown path can catch, finish its cleanup after (fail what is pending,
  close connections) and then re-raise. anyio's cancel scopes are level-triggered: inside
  a cancelled scope every later await raises again, so a library embedded in user code
  would need shielded scopes for each cleanup step, and would impose anyio's semantics on
  callers that never asked for them. The clients still work when the caller uses anyio on
  asyncio (the tests cover a cancelled anyio scope around a producer).
* The broker uses asyncio's TaskGroup too: one concurrency model for the whole tree.
"""
