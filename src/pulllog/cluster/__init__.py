"""A pulllog cluster: brokers registered in ZooKeeper and one elected controller.

Imported only by a broker started with ``zookeeper.connect`` (``pulllog serve --zookeeper``);
a plain ``pulllog serve`` never loads this package nor its ZooKeeper client. ``znodes`` holds
the znode formats (no I/O), ``membership`` the session that registers the broker and runs
the controller election.
"""
