"""The engine: runs schedules (realize.py). Input: ScheduleItems; output: filled buffers."""
