"""Process helpers shared by the tests and the load harness: real redis-servers on loopback
ports, gateway processes, free ports. Not part of the shipped package."""
