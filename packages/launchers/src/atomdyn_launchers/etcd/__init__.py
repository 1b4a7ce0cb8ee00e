"""etcd as the launchers and the jobs use it: where a run's keys live, how to reach the server, the client."""
